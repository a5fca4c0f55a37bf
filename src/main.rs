//! The `agent-a2a` binary: parses the command line and serves the default agent.

use std::process::ExitCode;
use std::sync::Arc;

use agent_a2a::cli::{Agent, run};
use agent_a2a::http::skill_cards;
use agent_a2a::runtime::ToolRoutingExecutor;
use agent_a2a::skills::SkillRegistry;

fn main() -> ExitCode {
    let skills = Arc::new(SkillRegistry::default());
    let executor = Arc::new(ToolRoutingExecutor::new(skills.clone()));
    run(Agent {
        executor,
        skills: skill_cards(&skills),
    })
}
