//! The tree of agents a deployment runs: the root (`[agent]`) and its sub-agents depth
//! first, each with its model, its instruction and the tools it offers that model, built
//! once from the configuration ([`AgentTree::build`], which names the agent and the problem
//! of a tree that cannot be built) and made anew when the list of tools changes
//! ([`AgentTree::retooled`]). A remote A2A agent is a node whose one tool asks it. The
//! [`Runner`](super::Runner) walks it: an agent may transfer the conversation to its
//! sub-agents and its parent.

use crate::config::{AgentSettings, SubAgentSettings};
use crate::skills::ToolSpec;

use super::ModelAdapter;

/// The tool-list entry that stands for every registered tool.
const ALL_TOOLS: &str = "*";

/// One agent of the tree.
#[derive(Clone)]
pub struct AgentNode {
    pub name: String,
    pub description: String,
    pub instruction: String,
    pub model: ModelAdapter,
    /// Sent as the request's model; `None`: the provider's configured model.
    pub model_name: Option<String>,
    /// The tools it offers its model: those of `wanted` that are registered.
    pub tools: Vec<ToolSpec>,
    /// The tools its settings name (`"*"`: all), which [`AgentTree::retooled`] takes
    /// from a new list of tools.
    pub wanted: Vec<String>,
    /// Positions in the tree of the agents this one may transfer to (its sub-agents).
    pub sub_agents: Vec<usize>,
    pub parent: Option<usize>,
    /// A remote A2A agent's node: the tool that asks it (`ask_<name>`, its one tool).
    /// Runs that reach it send it the user's message instead of asking a model (its
    /// `model` is its parent's, unused).
    pub remote: Option<String>,
}

impl std::fmt::Debug for AgentNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentNode")
            .field("name", &self.name)
            .field("provider", &self.model.provider.id())
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .field("sub_agents", &self.sub_agents)
            .finish()
    }
}

/// Why an agent tree could not be built from the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("agent {agent:?}: no provider is configured for it")]
    NoProvider { agent: String },
    #[error("agent {agent:?}: provider {provider:?} is not configured")]
    UnknownProvider { agent: String, provider: String },
    #[error("agent {agent:?}: tool {tool:?} is not registered (known: {known})")]
    UnknownTool {
        agent: String,
        tool: String,
        known: String,
    },
    #[error("agent name {0:?} is used twice")]
    DuplicateName(String),
}

/// The agents of a deployment: the root first, then its sub-agents depth first.
#[derive(Debug, Clone)]
pub struct AgentTree {
    nodes: Vec<AgentNode>,
}

impl AgentTree {
    /// Builds the tree of `[agent]`. `model` gives the adapter of a provider by name;
    /// `tools` are every registered tool.
    pub fn build(
        settings: &AgentSettings,
        model: &dyn Fn(&str) -> Option<ModelAdapter>,
        tools: &[ToolSpec],
    ) -> Result<AgentTree, TreeError> {
        let mut tree = AgentTree { nodes: Vec::new() };
        let root = NodeConfig {
            name: &settings.name,
            description: &settings.description,
            instruction: &settings.instruction,
            provider: &settings.provider,
            model: &settings.model,
            tools: &settings.tools,
            sub_agents: &settings.sub_agents,
            remote: "",
        };
        tree.add(root, None, "", model, tools)?;
        Ok(tree)
    }

    fn add(
        &mut self,
        config: NodeConfig<'_>,
        parent: Option<usize>,
        parent_provider: &str,
        model: &dyn Fn(&str) -> Option<ModelAdapter>,
        tools: &[ToolSpec],
    ) -> Result<usize, TreeError> {
        if self.find(config.name).is_some() {
            return Err(TreeError::DuplicateName(config.name.to_owned()));
        }
        let provider = if config.provider.is_empty() {
            parent_provider
        } else {
            config.provider
        };
        if provider.is_empty() {
            return Err(TreeError::NoProvider {
                agent: config.name.to_owned(),
            });
        }
        let adapter = model(provider).ok_or_else(|| TreeError::UnknownProvider {
            agent: config.name.to_owned(),
            provider: provider.to_owned(),
        })?;
        let remote = (!config.remote.is_empty()).then(|| format!("ask_{}", config.remote));
        let wanted = match &remote {
            Some(ask) => vec![ask.clone()],
            None => config.tools.to_vec(),
        };
        let own_tools = select_tools(config.name, &wanted, tools)?;
        let description = match (&remote, config.description) {
            (Some(_), "") => format!("The remote A2A agent {}.", config.remote),
            (_, description) => description.to_owned(),
        };
        let node = AgentNode {
            name: config.name.to_owned(),
            description,
            instruction: config.instruction.to_owned(),
            model: adapter,
            model_name: (!config.model.is_empty()).then(|| config.model.to_owned()),
            tools: own_tools,
            wanted,
            sub_agents: Vec::new(),
            parent,
            remote,
        };
        self.nodes.push(node);
        let at = self.nodes.len() - 1;
        for sub in config.sub_agents {
            let child = self.add(NodeConfig::sub(sub), Some(at), provider, model, tools)?;
            self.nodes[at].sub_agents.push(child);
        }
        Ok(at)
    }

    /// The same tree with each agent's tools taken from `tools`, a list that changed
    /// since the tree was built (an MCP server's): a tool an agent names that is no
    /// longer there is left out (the agent's model is no longer offered it), one that
    /// has appeared is offered to the agents that take all (`"*"`).
    pub fn retooled(&self, tools: &[ToolSpec]) -> AgentTree {
        let mut nodes = self.nodes.clone();
        for node in &mut nodes {
            node.tools = match node.wanted.iter().any(|w| w == ALL_TOOLS) {
                true => tools.to_vec(),
                false => node
                    .wanted
                    .iter()
                    .filter_map(|name| tools.iter().find(|t| &t.name == name).cloned())
                    .collect(),
            };
        }
        AgentTree { nodes }
    }

    /// The root agent.
    pub fn root(&self) -> &AgentNode {
        &self.nodes[0]
    }

    /// The agent at `at` (a position this tree handed out).
    pub fn node(&self, at: usize) -> &AgentNode {
        &self.nodes[at]
    }

    /// The position of the agent named `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The names agent `at` may transfer to: its sub-agents, then its parent.
    pub fn transfer_targets(&self, at: usize) -> Vec<&str> {
        let node = &self.nodes[at];
        node.sub_agents
            .iter()
            .chain(node.parent.iter())
            .map(|&i| self.nodes[i].name.as_str())
            .collect()
    }

    /// The names of the root's sub-agents (the valid names of the A.13 correction).
    pub fn root_sub_agent_names(&self) -> Vec<&str> {
        self.root()
            .sub_agents
            .iter()
            .map(|&i| self.nodes[i].name.as_str())
            .collect()
    }
}

/// The fields the root (`[agent]`) and sub-agents share.
struct NodeConfig<'a> {
    name: &'a str,
    description: &'a str,
    instruction: &'a str,
    provider: &'a str,
    model: &'a str,
    tools: &'a [String],
    sub_agents: &'a [SubAgentSettings],
    /// The `[[agent.remote_agents]]` this agent is; empty: none.
    remote: &'a str,
}

impl<'a> NodeConfig<'a> {
    fn sub(sub: &'a SubAgentSettings) -> Self {
        Self {
            name: &sub.name,
            description: &sub.description,
            instruction: &sub.instruction,
            provider: &sub.provider,
            model: &sub.model,
            tools: &sub.tools,
            sub_agents: &sub.sub_agents,
            remote: &sub.remote,
        }
    }
}

/// The specs named by `wanted` (`"*"`: all of them, in registration order).
fn select_tools(
    agent: &str,
    wanted: &[String],
    tools: &[ToolSpec],
) -> Result<Vec<ToolSpec>, TreeError> {
    if wanted.iter().any(|w| w == ALL_TOOLS) {
        return Ok(tools.to_vec());
    }
    wanted
        .iter()
        .map(|name| {
            tools
                .iter()
                .find(|t| &t.name == name)
                .cloned()
                .ok_or_else(|| TreeError::UnknownTool {
                    agent: agent.to_owned(),
                    tool: name.clone(),
                    known: tools
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::providers::ScriptedProvider;

    pub(in crate::agent) fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            output_schema: json!({"type": "object"}),
        }
    }

    pub(in crate::agent) fn settings(sub_agents: &[&str]) -> AgentSettings {
        AgentSettings {
            name: "root".into(),
            instruction: "Be brief.".into(),
            provider: "p".into(),
            tools: vec!["*".into()],
            sub_agents: sub_agents
                .iter()
                .map(|name| SubAgentSettings {
                    name: (*name).into(),
                    description: format!("{name} things"),
                    instruction: format!("You are {name}."),
                    provider: String::new(),
                    model: String::new(),
                    tools: Vec::new(),
                    sub_agents: Vec::new(),
                    remote: String::new(),
                })
                .collect(),
            ..AgentSettings::default()
        }
    }

    #[test]
    fn a_tree_retooled_takes_the_tools_its_agents_name_from_the_new_list() {
        let provider = Arc::new(ScriptedProvider::new("p", "m", []));
        let adapter = ModelAdapter::new(provider);
        let mut settings = settings(&["billing"]);
        settings.sub_agents[0].tools = vec!["lookup".into(), "slow".into()];
        let tree = AgentTree::build(
            &settings,
            &|name| (name == "p").then(|| adapter.clone()),
            &[spec("lookup"), spec("slow")],
        )
        .unwrap();
        let names = |tree: &AgentTree, agent: &str| -> Vec<String> {
            let node = tree.node(tree.find(agent).unwrap());
            node.tools.iter().map(|t| t.name.clone()).collect()
        };
        // `slow` went away and `fresh` came: the root (`*`) takes all there are, billing
        // keeps what it named and still exists.
        let mut changed = spec("lookup");
        changed.description = "the lookup tool, changed".into();
        let retooled = tree.retooled(&[changed, spec("fresh")]);
        assert_eq!(names(&retooled, "root"), ["lookup", "fresh"]);
        assert_eq!(names(&retooled, "billing"), ["lookup"]);
        let billing = retooled.node(retooled.find("billing").unwrap());
        assert_eq!(billing.tools[0].description, "the lookup tool, changed");
        // Back again, it is offered again.
        let again = retooled.retooled(&[spec("lookup"), spec("slow")]);
        assert_eq!(names(&again, "billing"), ["lookup", "slow"]);
        assert_eq!(
            again.transfer_targets(again.find("billing").unwrap()),
            ["root"]
        );
    }

    #[test]
    fn tree_errors_name_the_agent_and_the_problem() {
        let provider = Arc::new(ScriptedProvider::new("p", "m", []));
        let adapter = ModelAdapter::new(provider);
        let model = |name: &str| (name == "p").then(|| adapter.clone());
        let mut unknown_tool = settings(&[]);
        unknown_tool.tools = vec!["nope".into()];
        let e = AgentTree::build(&unknown_tool, &model, &[spec("lookup")]).unwrap_err();
        assert!(
            matches!(&e, TreeError::UnknownTool { tool, .. } if tool == "nope"),
            "{e}"
        );
        assert!(e.to_string().contains("lookup"), "{e}");

        let mut no_provider = settings(&[]);
        no_provider.provider = String::new();
        let e = AgentTree::build(&no_provider, &model, &[]).unwrap_err();
        assert_eq!(
            e,
            TreeError::NoProvider {
                agent: "root".into()
            }
        );

        let mut unknown_provider = settings(&[]);
        unknown_provider.provider = "q".into();
        let e = AgentTree::build(&unknown_provider, &model, &[]).unwrap_err();
        assert!(matches!(e, TreeError::UnknownProvider { .. }));

        let e = AgentTree::build(&settings(&["a", "a"]), &model, &[]).unwrap_err();
        assert_eq!(e, TreeError::DuplicateName("a".into()));
    }
}
