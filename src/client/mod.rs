//! The outbound side: remote A2A agents the agent asks, behind the tool seam every other
//! tool uses.
//!
//! [`a2a`] is the A2A client: it reads a remote agent's card (within the push receivers'
//! URL policy, size-limited, cached by its `Cache-Control`), picks the first interface of
//! the card it speaks (JSON-RPC or HTTP+JSON, A2A 1.0), sends a message and follows the
//! task to its end or until it asks for input. [`tools`] makes each configured remote
//! agent a skill with one tool, `ask_<name>`, with a breaker and metrics per agent.

pub mod a2a;
pub mod tools;

pub use tools::remote_agents;
