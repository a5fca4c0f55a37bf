//! What thread actors, the persistence actor and the push delivery share: the outbox's
//! depth and bound, the signal that new deliveries were committed, and the hand-over of
//! committed deliveries to a delivery that holds every owed one in memory.
//!
//! Thread actors write outbox rows in the batch that logs each event (`WriteOp::EnqueuePush`,
//! planned in `thread/plan/`). The persistence actor tells the hub what each commit
//! wrote before it acknowledges the commit ([`PushHub::committed`]). The delivery
//! (`crate::push`) either reads the rows back from the store, or — once it has read every
//! owed row while no commit could run ([`PushHub::hand_over`], under the persistence
//! actor's pause) — takes each committed row from the hub instead ([`PushHub::take`]), so
//! the outbox is written but not read while every owed delivery fits in memory
//! (`push.memory_rows`).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::config::PushSettings;
use crate::domain::{PushConfig, TaskId, TenantId};
use crate::store::{Delivery, OutboxKey, WriteOp};
use crate::telemetry;

/// What a commit told the delivery, in commit order.
#[derive(Debug)]
pub enum Handed {
    /// A delivery is owed (its first attempt is due now).
    Owed(Delivery),
    /// A config was registered or replaced: owed deliveries go to it as it is now.
    Config(Arc<PushConfig>),
    /// A config was deleted with every delivery owed to it.
    Forget {
        tenant: TenantId,
        task_id: TaskId,
        config_id: String,
    },
}

/// Why the delivery went back to reading the outbox (`reason` of
/// `agent_a2a_push_from_memory_left_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftMemory {
    /// More deliveries were owed than `push.memory_rows`.
    Full,
    /// A commit deleted owed rows the hub cannot name (threads past their retention).
    Retired,
    /// The store refused a write of the delivery's: what it holds may differ from memory.
    StoreError,
}

impl LeftMemory {
    pub fn as_str(self) -> &'static str {
        match self {
            LeftMemory::Full => "full",
            LeftMemory::Retired => "retired",
            LeftMemory::StoreError => "store_error",
        }
    }
}

/// The hand-over between commits and the delivery.
#[derive(Default)]
struct HandOver {
    /// The delivery holds every owed row, and takes each committed one from here.
    on: bool,
    /// Set when the hand-over stopped, for the delivery to see once.
    left: Option<LeftMemory>,
    items: Vec<Handed>,
}

/// The outbox as the runtime sees it.
pub struct PushHub {
    max_configs_per_task: usize,
    max_outbox: u64,
    memory_rows: u64,
    /// Deliveries owed, as last counted: the delivery sets it from the store, commits
    /// add what they write, the delivery subtracts what it finishes.
    depth: AtomicU64,
    woken: Notify,
    hand_over: Mutex<HandOver>,
}

impl PushHub {
    pub fn new(settings: &PushSettings) -> Self {
        Self {
            max_configs_per_task: settings.max_configs_per_task,
            max_outbox: settings.max_outbox,
            memory_rows: settings.memory_rows as u64,
            depth: AtomicU64::new(0),
            woken: Notify::new(),
            hand_over: Mutex::new(HandOver::default()),
        }
    }

    pub fn max_configs_per_task(&self) -> usize {
        self.max_configs_per_task
    }

    /// Owed deliveries the delivery may hold in memory (`push.memory_rows`).
    pub fn memory_rows(&self) -> usize {
        usize::try_from(self.memory_rows).unwrap_or(usize::MAX)
    }

    /// Keeps the batch's outbox rows if the outbox has room for them, else drops them
    /// (each counted as a dropped delivery).
    pub(crate) fn admit(&self, ops: &mut Vec<WriteOp>) {
        let rows = ops
            .iter()
            .filter(|op| matches!(op, WriteOp::EnqueuePush { .. }))
            .count() as u64;
        if rows == 0 || self.depth().saturating_add(rows) <= self.max_outbox {
            return;
        }
        ops.retain(|op| match op {
            WriteOp::EnqueuePush { config, seq, .. } => {
                tracing::warn!(task_id = %config.task_id, config_id = config.id, seq, max_outbox = self.max_outbox, "push outbox full (push.max_outbox): delivery dropped");
                false
            }
            _ => true,
        });
        metrics::counter!(telemetry::PUSH_DELIVERIES, "outcome" => "dropped").increment(rows);
    }

    /// A batch was committed (called by the persistence actor before it acknowledges
    /// the batch, so a commit's rows are handed over before anything that follows it
    /// can happen): counts the outbox rows it wrote, hands them, and the configs it
    /// changed, to the delivery if it holds every owed row, and wakes it.
    pub(crate) fn committed(&self, ops: Vec<WriteOp>) {
        let rows = ops
            .iter()
            .filter(|op| matches!(op, WriteOp::EnqueuePush { .. }))
            .count() as u64;
        if rows == 0 && !ops.iter().any(changes_configs) {
            return;
        }
        let depth = self.depth.fetch_add(rows, Ordering::Relaxed) + rows;
        {
            let mut state = self.lock();
            if state.on {
                hand(&mut state, ops);
                if state.on && depth > self.memory_rows {
                    Self::stop(&mut state, LeftMemory::Full);
                }
            }
        }
        if rows > 0 {
            metrics::gauge!(telemetry::PUSH_OUTBOX_DEPTH).set(depth as f64);
        }
        self.woken.notify_one();
    }

    /// Starts handing committed rows to the delivery, which is reading every owed row
    /// while no commit runs. Drops anything handed before.
    pub fn hand_over(&self) {
        let mut state = self.lock();
        state.on = true;
        state.left = None;
        state.items.clear();
    }

    /// The read that [`PushHub::hand_over`] began did not end with every owed row held
    /// (more than `push.memory_rows`, or the store failed): nothing more is handed.
    pub fn abandon_hand_over(&self) {
        let mut state = self.lock();
        *state = HandOver::default();
    }

    /// Stops handing rows over: the delivery reads the outbox again.
    pub fn stop_hand_over(&self, why: LeftMemory) {
        let mut state = self.lock();
        if state.on {
            Self::stop(&mut state, why);
        }
    }

    /// Whether commits hand their rows over: the delivery holds every owed one.
    pub fn handing_over(&self) -> bool {
        self.lock().on
    }

    /// What commits handed over since the last call, in commit order; `Err` with why
    /// if the hand-over stopped (then what was handed is dropped: the delivery must read
    /// the outbox).
    pub fn take(&self, into: &mut Vec<Handed>) -> Result<(), LeftMemory> {
        let mut state = self.lock();
        if let Some(why) = state.left.take() {
            return Err(why);
        }
        if state.on {
            into.append(&mut state.items);
        }
        Ok(())
    }

    fn stop(state: &mut HandOver, why: LeftMemory) {
        state.on = false;
        state.left = Some(why);
        state.items = Vec::new();
        metrics::counter!(telemetry::PUSH_FROM_MEMORY_LEFT, "reason" => why.as_str()).increment(1);
        metrics::gauge!(telemetry::PUSH_FROM_MEMORY).set(0.0);
        if why != LeftMemory::StoreError {
            tracing::info!(
                reason = why.as_str(),
                "push delivery reads the outbox again (push.memory_rows)"
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HandOver> {
        // The state is a flag and a list: a panic while held leaves it usable.
        self.hand_over
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `rows` deliveries left the outbox.
    pub fn finished(&self, rows: u64) {
        let _ = self
            .depth
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some(d.saturating_sub(rows))
            });
        metrics::gauge!(telemetry::PUSH_OUTBOX_DEPTH).set(self.depth() as f64);
    }

    /// The outbox's depth as the store counted it.
    pub fn set_depth(&self, depth: u64) {
        self.depth.store(depth, Ordering::Relaxed);
        metrics::gauge!(telemetry::PUSH_OUTBOX_DEPTH).set(depth as f64);
    }

    pub fn depth(&self) -> u64 {
        self.depth.load(Ordering::Relaxed)
    }

    /// Resolves when deliveries were committed since the last call (or now, if some
    /// were and nobody was waiting).
    pub async fn woken(&self) {
        self.woken.notified().await;
    }
}

/// A write that registers, replaces or deletes a config, or deletes owed rows by thread.
fn changes_configs(op: &WriteOp) -> bool {
    matches!(
        op,
        WriteOp::PutPushConfig(_)
            | WriteOp::DeletePushConfig { .. }
            | WriteOp::RetireThreads { .. }
    )
}

/// Hands a committed batch's outbox rows and config changes over, in order.
fn hand(state: &mut HandOver, ops: Vec<WriteOp>) {
    for op in ops {
        let handed = match op {
            WriteOp::EnqueuePush {
                config,
                seq,
                payload,
                created_at,
            } => Handed::Owed(Delivery {
                key: OutboxKey {
                    tenant: config.tenant.clone(),
                    task_id: config.task_id.clone(),
                    config_id: config.id.clone(),
                    seq,
                },
                payload,
                created_at,
                attempts: 0,
                config,
            }),
            WriteOp::PutPushConfig(config) => Handed::Config(Arc::new(config)),
            WriteOp::DeletePushConfig {
                tenant,
                task_id,
                config_id,
            } => Handed::Forget {
                tenant,
                task_id,
                config_id,
            },
            // Rows of threads past their retention went with them; which ones, only the
            // store knows.
            WriteOp::RetireThreads { .. } => {
                PushHub::stop(state, LeftMemory::Retired);
                return;
            }
            _ => continue,
        };
        state.items.push(handed);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::{ContextId, PushDialect, PushPayload, StreamEvent, Timestamp};

    fn config(id: &str) -> Arc<PushConfig> {
        Arc::new(PushConfig {
            tenant: TenantId::default_tenant(),
            task_id: TaskId::parse("task-1").unwrap(),
            id: id.into(),
            url: "https://hooks.example.org/".into(),
            token: None,
            auth: None,
            dialect: PushDialect::V1,
            created_at: Timestamp(1),
        })
    }

    /// An outbox row of config `config_id` of `task-1`, its event `seq`.
    pub(crate) fn owed(config_id: &str, seq: i64) -> WriteOp {
        let config = config(config_id);
        WriteOp::EnqueuePush {
            payload: PushPayload::Event {
                event: Box::new(StreamEvent::StatusUpdate {
                    task_id: config.task_id.clone(),
                    context_id: ContextId::parse("ctx-1").unwrap(),
                    status: crate::domain::TaskStatus {
                        state: crate::domain::TaskState::Working,
                        message: None,
                        timestamp: Timestamp(seq),
                    },
                    metadata: None,
                }),
            },
            config,
            seq,
            created_at: Timestamp(seq),
        }
    }

    fn hub(memory_rows: usize) -> PushHub {
        PushHub::new(&PushSettings {
            memory_rows,
            ..PushSettings::default()
        })
    }

    fn take(hub: &PushHub) -> Result<Vec<String>, LeftMemory> {
        let mut handed = Vec::new();
        hub.take(&mut handed)?;
        Ok(handed
            .iter()
            .map(|h| match h {
                Handed::Owed(d) => format!("owed {}:{}", d.key.config_id, d.key.seq),
                Handed::Config(c) => format!("config {}", c.id),
                Handed::Forget { config_id, .. } => format!("forget {config_id}"),
            })
            .collect())
    }

    #[test]
    fn commits_are_counted_and_handed_over_in_order_only_while_the_delivery_holds_them() {
        let hub = hub(10);
        hub.committed(vec![owed("a", 1)]);
        assert_eq!(hub.depth(), 1);
        assert_eq!(
            take(&hub),
            Ok(vec![]),
            "nothing handed before the hand-over"
        );
        hub.hand_over();
        hub.committed(vec![
            WriteOp::PutPushConfig((*config("b")).clone()),
            owed("b", 1),
            owed("a", 2),
        ]);
        hub.committed(vec![WriteOp::DeletePushConfig {
            tenant: TenantId::default_tenant(),
            task_id: TaskId::parse("task-1").unwrap(),
            config_id: "a".into(),
        }]);
        assert_eq!(
            take(&hub),
            Ok(vec![
                "config b".to_owned(),
                "owed b:1".into(),
                "owed a:2".into(),
                "forget a".into()
            ])
        );
        assert_eq!(hub.depth(), 3);
        assert!(hub.handing_over());
    }

    #[test]
    fn more_owed_than_memory_holds_or_retired_threads_end_the_hand_over_once() {
        let hub = hub(2);
        hub.hand_over();
        hub.committed(vec![owed("a", 1), owed("a", 2)]);
        hub.committed(vec![owed("a", 3)]);
        assert_eq!(take(&hub), Err(LeftMemory::Full));
        assert!(!hub.handing_over());
        // Said once; what was handed is dropped, and nothing more is handed.
        hub.committed(vec![owed("a", 4)]);
        assert_eq!(take(&hub), Ok(vec![]));
        assert_eq!(hub.depth(), 4);

        let hub = self::hub(10);
        hub.hand_over();
        hub.committed(vec![
            owed("a", 1),
            WriteOp::RetireThreads {
                tenant: TenantId::default_tenant(),
                thread_ids: Vec::new(),
                before: Timestamp(1),
            },
        ]);
        assert_eq!(take(&hub), Err(LeftMemory::Retired));
        // An abandoned hand-over says nothing.
        hub.hand_over();
        hub.abandon_hand_over();
        assert_eq!(take(&hub), Ok(vec![]));
    }
}
