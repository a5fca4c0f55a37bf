//! Fencing, as the store and the cluster share it: this node's lease ([`Fence`], checked
//! by every commit of the node) and a turn's hold on its thread ([`ThreadHold`], checked
//! by the writes its tools make), with the messages a refused write raises. The SQL that
//! checks them is the writer's (`postgres/writer.rs`) and the memories' (`memories/`);
//! the cluster (`crate::cluster`) sets the token.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// This node's lease as every commit checks it: the node id and its current fencing
/// token (0 until the node has joined). Shared by the store (which checks it in every
/// commit) and the cluster (which sets it, and learns from it that a commit found it
/// moved).
#[derive(Debug)]
pub struct Fence {
    node_id: String,
    token: AtomicI64,
    /// A commit found the token moved: another node took over a thread of this one.
    lost: AtomicBool,
    lost_signal: tokio::sync::Notify,
}

impl Fence {
    pub fn new(node_id: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            node_id: node_id.into(),
            token: AtomicI64::new(0),
            lost: AtomicBool::new(false),
            lost_signal: tokio::sync::Notify::new(),
        })
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The token commits carry; 0 before the node joined.
    pub fn token(&self) -> i64 {
        self.token.load(Ordering::SeqCst)
    }

    /// The node (re)joined with `token`.
    pub fn set_token(&self, token: i64) {
        self.lost.store(false, Ordering::SeqCst);
        self.token.store(token, Ordering::SeqCst);
    }

    /// A commit (or a renewal) found the token moved.
    pub fn mark_lost(&self) {
        if !self.lost.swap(true, Ordering::SeqCst) {
            self.lost_signal.notify_one();
        }
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Resolves once a commit found the lease lost (at once if one already did).
    pub async fn lost(&self) {
        loop {
            let notified = self.lost_signal.notified();
            if self.is_lost() {
                return;
            }
            notified.await;
        }
    }
}

/// A turn's hold on its thread in cluster mode: the fencing token under which the
/// thread's actor was placed on this node. A tool's write made under it (the memory
/// skill's) checks it in the write's own statement, as every commit of the turn does:
/// the node's row is read under a KEY SHARE lock (a takeover, which locks it exclusively
/// before it raises the token, waits until the write has committed) and the thread must
/// not be another node's. A moved token or another owner refuses the write
/// ([`StoreError::Fenced`](super::StoreError::Fenced)): a turn fenced off by a takeover writes nothing anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadHold<'a> {
    pub thread: &'a crate::domain::ContextId,
    pub token: i64,
}

/// The messages `a2a_require` raises when a write under a [`ThreadHold`] finds the
/// node's token moved, or the thread another node's (read back as
/// [`StoreError::Fenced`](super::StoreError::Fenced)).
pub const HOLD_LOST: &str = "fenced: this node no longer holds the lease the turn was placed under";
pub const THREAD_ELSEWHERE: &str = "fenced: the turn's thread is another node's";
