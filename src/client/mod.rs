//! The outbound side: remote A2A agents the agent asks, behind the tool seam every other
//! tool uses.
//!
//! [`a2a`] is the A2A client: it reads a remote agent's card (within the push receivers'
//! URL policy, size-limited, cached by its `Cache-Control`), picks the first interface of
//! the card it speaks (JSON-RPC, HTTP+JSON or gRPC in A2A 1.0; JSON-RPC or HTTP+JSON in
//! 0.3), sends a message and follows the task to its end or until it asks for input
//! (its gRPC binding is `a2a::grpc`). [`tools`] makes each configured remote
//! agent a skill with one tool, `ask_<name>`, with a breaker and metrics per agent.
//! `push::Secrets` cuts the credentials a peer is given out of everything it sends back.

pub mod a2a;
pub mod mcp;
pub mod tools;

pub use mcp::mcp_servers;
pub use tools::remote_agents;
