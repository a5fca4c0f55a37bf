//! The public agent card as served: rendered at start, and again when the agent's tools
//! change (an MCP server's list did), each rendering serialized once with its `ETag`.

use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Renders the public card from the skills' tools as they are (signed when cards are).
pub type Render = Box<dyn Fn() -> Result<Value, String> + Send + Sync>;

/// One rendering of the public card.
pub struct Published {
    pub card: Value,
    /// `card` serialized.
    pub body: String,
    /// A strong validator of `body`.
    pub etag: String,
    /// When this rendering was made.
    pub last_modified: SystemTime,
    /// The list of tools it was rendered for ([`crate::runtime::Tools::generation`]).
    generation: u64,
}

impl Published {
    fn of(card: Value, generation: u64) -> Published {
        let body = card.to_string();
        let etag = format!("\"{:x}\"", Sha256::digest(body.as_bytes()));
        Published {
            card,
            body,
            etag,
            last_modified: SystemTime::now(),
            generation,
        }
    }
}

/// The public card, rendered anew for each list of tools.
pub struct PublicCard {
    current: ArcSwap<Published>,
    render: Render,
}

impl PublicCard {
    /// Renders the card for the tools listed at start; an error stops the start.
    pub fn new(render: Render) -> Result<PublicCard, String> {
        let card = render()?;
        Ok(PublicCard {
            current: ArcSwap::from_pointee(Published::of(card, 0)),
            render,
        })
    }

    /// The card for the tools of `generation`: the rendering made for them, or a new one
    /// when they changed since. A rendering that fails keeps the last one (logged).
    pub fn for_tools(&self, generation: u64) -> Arc<Published> {
        let current = self.current.load_full();
        if current.generation == generation {
            return current;
        }
        match (self.render)() {
            Ok(card) => {
                let published = Arc::new(Published::of(card, generation));
                self.current.store(published.clone());
                tracing::info!(generation, etag = %published.etag, "agent card rendered for the changed tools");
                published
            }
            Err(e) => {
                tracing::error!(error = %e, "agent card not rendered anew; serving the last one");
                current
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use serde_json::json;

    use super::*;

    #[test]
    fn the_card_is_rendered_once_per_list_of_tools() {
        let renders = Arc::new(AtomicU64::new(0));
        let counted = renders.clone();
        let card = PublicCard::new(Box::new(move || {
            let n = counted.fetch_add(1, Ordering::Relaxed);
            match n {
                2 => Err("signing failed".into()),
                n => Ok(json!({"n": n})),
            }
        }))
        .unwrap();
        let first = card.for_tools(0);
        assert_eq!(first.card, json!({"n": 0}));
        assert_eq!(card.for_tools(0).etag, first.etag);
        assert_eq!(renders.load(Ordering::Relaxed), 1);
        let second = card.for_tools(1);
        assert_eq!(second.card, json!({"n": 1}));
        assert_ne!(second.etag, first.etag);
        assert_eq!(card.for_tools(1).etag, second.etag);
        // A failed rendering serves the last one.
        assert_eq!(card.for_tools(2).card, json!({"n": 1}));
        assert_eq!(card.for_tools(2).card, json!({"n": 3}));
        assert_eq!(renders.load(Ordering::Relaxed), 4);
    }
}
