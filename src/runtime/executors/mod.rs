//! The executors: the `AgentExecutor` seam a turn runs through (`executor.rs`), the
//! default tool-routing executor (`tool_router.rs`), and the agent loop and routing-model
//! executors over the agent layer (`agent_loop.rs`).

mod agent_loop;
pub mod executor;
mod tool_router;

pub(super) use agent_loop::configured;
pub use agent_loop::{AgentLoopExecutor, RoutingExecutor};
pub use tool_router::ToolRoutingExecutor;
pub(super) use tool_router::started_elsewhere;
