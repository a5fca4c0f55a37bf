//! What a retried send is compared with: a digest of the message as the client sent it
//! (before the server fills in its context or task) and of the request's metadata.

use sha2::{Digest, Sha256};

use crate::domain::SendMessage;

/// SHA-256, in hex, of the message and the request metadata in their storage encoding
/// (stable: the same request always gives the same digest). Under an `Idempotency-Key`
/// the message's own id is left out: a client may mint a new one per attempt.
pub(super) fn digest(cmd: &SendMessage) -> String {
    let mut hash = Hashing(Sha256::new());
    // Serialized straight into the hash. Serializing domain values cannot fail (string
    // keys, no non-finite floats).
    match &cmd.idempotency_key {
        None => {
            let _ = serde_json::to_writer(&mut hash, &cmd.message);
        }
        Some(_) => {
            let mut message = cmd.message.clone();
            message.message_id = crate::domain::MessageId::parse("-".to_owned())
                .unwrap_or_else(|_| message.message_id.clone());
            let _ = serde_json::to_writer(&mut hash, &message);
        }
    }
    hash.0.update([0]);
    let _ = serde_json::to_writer(&mut hash, &cmd.metadata);
    format!("{:x}", hash.0.finalize())
}

/// Feeds what is written to the hash.
struct Hashing(Sha256);

impl std::io::Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Message, MessageId, Part, Role, SendConfig};

    fn send(id: &str, text: &str, key: Option<&str>) -> SendMessage {
        SendMessage {
            message: Message {
                message_id: MessageId::parse(id).unwrap(),
                context_id: None,
                task_id: None,
                role: Role::User,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: vec![],
                reference_task_ids: vec![],
            },
            config: SendConfig::default(),
            metadata: None,
            create_missing_task: false,
            idempotency_key: key.map(str::to_owned),
        }
    }

    #[test]
    fn the_same_message_digests_the_same_and_any_change_differs() {
        assert_eq!(
            digest(&send("m-1", "hi", None)),
            digest(&send("m-1", "hi", None))
        );
        assert_ne!(
            digest(&send("m-1", "hi", None)),
            digest(&send("m-1", "ho", None))
        );
        let mut config = send("m-1", "hi", None);
        config.config.return_immediately = true;
        assert_eq!(
            digest(&config),
            digest(&send("m-1", "hi", None)),
            "options are not content"
        );
        // Under an Idempotency-Key, a fresh message id per attempt is the same request.
        assert_eq!(
            digest(&send("m-1", "hi", Some("k"))),
            digest(&send("m-2", "hi", Some("k")))
        );
        assert_ne!(
            digest(&send("m-1", "hi", None)),
            digest(&send("m-2", "hi", None))
        );
    }
}
