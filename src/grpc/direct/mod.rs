//! The hot methods' road without ProtoJSON: a `SendMessage` or `SendStreamingMessage`
//! request read straight into the domain's command (`request`), and a send's outcome, a
//! task and a stream event written straight into their protobuf (`answer`), with
//! `google.protobuf.Struct`/`Value` converted as ProtoJSON converts them (`value`).
//!
//! It is a shortcut, not a second set of rules: each side reads or writes only what it
//! can do exactly as the transcoding road (`convert`) does, and declines the rest, which
//! then takes that road. Property tests hold the two roads to the same command and the
//! same protobuf.

mod answer;
mod request;
mod value;

pub use answer::{send_response, stream_response, task};
pub use request::read_send;
