//! What every connection this server makes to another server passes: the URL policy and
//! its checked resolver ([`UrlPolicy`], `CheckedResolver`: push receivers, remote agents'
//! cards, interfaces and key sets, MCP servers over HTTP), and the credentials given to a
//! peer cut out of what it sends back ([`Secrets`]). `push` and `client` both import it;
//! it imports neither.

pub mod policy;
pub mod secrets;

pub(crate) use policy::CheckedResolver;
pub use policy::UrlPolicy;
pub use secrets::Secrets;
