//! The executors: the `AgentExecutor` seam a turn runs through (`executor.rs`), the
//! default tool-routing executor (`tool_router.rs`), and the agent loop and routing-model
//! executors over the agent layer (`agent_loop.rs`, `routing_model.rs`); [`configured`]
//! picks the one `[agent]` describes.

mod agent_loop;
pub mod executor;
mod routing_model;
mod tool_router;

use std::sync::Arc;

use crate::agent::AgentTree;
use crate::runtime::Tools;
use executor::AgentExecutor;

pub use agent_loop::AgentLoopExecutor;
pub use routing_model::RoutingExecutor;
pub use tool_router::ToolRoutingExecutor;
pub(super) use tool_router::started_elsewhere;

/// The executor `[agent]` describes: the agent tree when `provider` is set, the routing
/// model when only `routing_provider` is, and direct tool routing otherwise.
pub(in crate::runtime) fn configured(
    settings: &crate::config::Settings,
    models: &crate::runtime::model_actor::Models,
    tools: &Tools,
    skills: &[(String, String)],
) -> std::result::Result<Arc<dyn AgentExecutor>, crate::agent::TreeError> {
    let agent = &settings.agent;
    if !agent.provider.is_empty() {
        let tree = AgentTree::build(agent, &|name| models.adapter(name), &tools.specs())?;
        tracing::info!(agent = %agent.name, provider = %agent.provider, "agent loop enabled");
        return Ok(Arc::new(AgentLoopExecutor::new(
            tree,
            agent,
            &settings.history,
        )));
    }
    if !agent.routing_provider.is_empty() {
        let model = models.adapter(&agent.routing_provider).ok_or_else(|| {
            crate::agent::TreeError::UnknownProvider {
                agent: agent.name.clone(),
                provider: agent.routing_provider.clone(),
            }
        })?;
        let executor = RoutingExecutor::new(model, agent, skills);
        if let Some(tool) = executor.forced_tool() {
            let specs = tools.specs();
            if !specs.iter().any(|spec| spec.name == tool) {
                let known: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
                return Err(crate::agent::TreeError::UnknownTool {
                    agent: "agent.routing_tool_choice".into(),
                    tool: tool.to_owned(),
                    known: known.join(", "),
                });
            }
        }
        tracing::info!(provider = %agent.routing_provider, "routing model enabled");
        return Ok(Arc::new(executor));
    }
    tracing::info!("no model configured: explicit tool calls only");
    Ok(Arc::new(ToolRoutingExecutor))
}
