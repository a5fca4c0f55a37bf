//! `send`: one `SendMessage` (`message/send`) of a text message per operation, each with
//! a fresh `messageId` and no context, so every one starts a conversation of its own.

use std::sync::Arc;
use std::time::Instant;

use crate::client::Client;
use crate::driver::Operation;
use crate::protocol::ErrorKind;
use crate::stats::Stats;

pub struct SendOp {
    client: Arc<Client>,
    text: Arc<str>,
}

impl SendOp {
    pub fn new(client: Arc<Client>, text: Arc<str>) -> Self {
        Self { client, text }
    }
}

impl Operation for SendOp {
    const LATENCY: &'static str = "request";

    async fn run(&mut self, _intended: Instant, _stats: &mut Stats) -> Result<String, ErrorKind> {
        let dialect = self.client.dialect();
        let message = dialect.user_message(
            self.client.message_id(),
            vec![dialect.text_part(&self.text)],
            None,
            None,
        );
        self.client.send_message(message).await?.outcome()
    }
}
