//! The calls in flight on one connection that wait to hear that their answer was too
//! large: the transports drop such an answer before it is decoded, and tell the call it
//! answered, by the request's id, so that the call fails at once rather than at its
//! timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::RequestId;
use tokio::sync::oneshot;

/// The calls in flight on one connection that wait to hear their answer was too large.
#[derive(Default)]
pub(super) struct Oversized(Mutex<HashMap<String, oneshot::Sender<()>>>);

impl Oversized {
    /// Told when the answer to `id` was too large; stops listening when dropped.
    pub(super) fn listen(self: &Arc<Self>, id: &RequestId) -> Listening {
        let key = id_text(id);
        let (told, hears) = oneshot::channel();
        self.calls().insert(key.clone(), told);
        Listening {
            oversized: self.clone(),
            key,
            hears,
        }
    }

    pub(super) fn found(&self, id: &str) {
        if let Some(told) = self.calls().remove(id) {
            let _ = told.send(());
        }
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<()>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One call's listening for its oversized answer.
pub(super) struct Listening {
    oversized: Arc<Oversized>,
    key: String,
    hears: oneshot::Receiver<()>,
}

impl Listening {
    /// Resolves when the call's answer was found too large (never, if it was not).
    pub(super) async fn heard(&mut self) {
        if (&mut self.hears).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Whether the call's answer was found too large by now.
    pub(super) fn was_heard(&mut self) -> bool {
        self.hears.try_recv().is_ok()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.oversized.calls().remove(&self.key);
    }
}

/// A request id as JSON writes it (`7`, `"a"`).
pub(super) fn id_text(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}
