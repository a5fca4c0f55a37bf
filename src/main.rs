//! The `agent-a2a` binary: parses the command line and serves the default agent.

use std::process::ExitCode;
use std::sync::Arc;

use agent_a2a::cli::{Agent, SkillSource, run};
use agent_a2a::runtime::ToolRoutingExecutor;

fn main() -> ExitCode {
    run(Agent {
        skills: SkillSource::Configured,
        ..Agent::new(Arc::new(ToolRoutingExecutor))
    })
}
