//! The `agent-a2a` binary: parses the command line and serves the default agent.

use std::process::ExitCode;

use agent_a2a::cli::{Agent, run};

fn main() -> ExitCode {
    run(Agent::configured())
}
