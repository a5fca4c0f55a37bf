//! The `agent-a2a` binary: parses the command line and serves the default agent.

use std::process::ExitCode;

use agent_a2a::cli::{Agent, run};

/// mimalloc instead of the system allocator: a request allocates many small, short-lived
/// objects across threads, which glibc malloc serves slowly (measured in benches/results/HISTORY.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    run(Agent::configured())
}
