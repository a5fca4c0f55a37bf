//! The credentials this server sends to another server, cut out of what that server
//! sends back: a remote that echoes its request headers in an error, or a tool that
//! returns its environment, must not hand them to the model, the caller or the log.

use serde_json::Value;

/// What stands in a text for a credential cut out of it.
pub const REDACTED: &str = "[redacted]";

/// The credentials one peer is given (empty ones left out).
#[derive(Debug, Clone, Default)]
pub struct Secrets(Vec<String>);

impl Secrets {
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(|s| s.as_ref().trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        // The longer first: one secret may hold another.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self(secrets)
    }

    /// `text` with every credential replaced by [`REDACTED`].
    pub fn text(&self, text: String) -> String {
        let mut text = text;
        for secret in &self.0 {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text
    }

    /// Every string in `value`, at every depth, keys included, as [`text`](Self::text)
    /// gives it.
    pub fn value(&self, value: &mut Value) {
        if self.0.is_empty() {
            return;
        }
        match value {
            Value::String(text) => *text = self.text(std::mem::take(text)),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(fields) => {
                let has_secret = |key: &str| self.0.iter().any(|s| key.contains(s.as_str()));
                if fields.keys().any(|key| has_secret(key)) {
                    let taken = std::mem::take(fields);
                    for (key, item) in taken {
                        fields.insert(self.text(key), item);
                    }
                }
                fields.values_mut().for_each(|item| self.value(item));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_credential_is_cut_out_of_text_and_values() {
        let secrets = Secrets::new(["s3cret", "", "  ", "s3cret-and-more"]);
        assert_eq!(
            secrets
                .text("bad credentials: Authorization=Bearer s3cret-and-more, key s3cret".into()),
            "bad credentials: Authorization=Bearer [redacted], key [redacted]"
        );
        let mut value = json!({"text": "s3cret", "list": [{"s3cret": 1}, "a s3cret b"], "n": 1});
        secrets.value(&mut value);
        assert_eq!(
            value,
            json!({"text": "[redacted]", "list": [{"[redacted]": 1}, "a [redacted] b"], "n": 1})
        );
        // Nothing configured: nothing changes.
        assert_eq!(Secrets::new([""]).text("as it was".into()), "as it was");
    }
}
