//! Every owed delivery, held in memory while they fit (`push.memory_rows`): what the
//! delivery attempts instead of reading the outbox, kept as the store keeps it — per
//! config in `seq` order, the first of each due at its next attempt's time — from one
//! read of every owed row made while no commit could run, then from what each commit
//! hands over (`runtime::push::Handed`).

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use crate::domain::PushConfig;
use crate::store::Delivery;

/// One config's queue: deliveries of one config go one at a time.
pub(super) type Lane = (crate::domain::TenantId, crate::domain::TaskId, String);

pub(super) fn lane_of(d: &Delivery) -> Lane {
    (
        d.key.tenant.clone(),
        d.key.task_id.clone(),
        d.key.config_id.clone(),
    )
}

/// A config's owed deliveries, each with when it may be attempted.
#[derive(Default)]
struct Owed {
    rows: VecDeque<(Delivery, Instant)>,
    /// Its first delivery is being attempted (or its outcome committed): the next waits.
    out: bool,
    /// The config as registered since that delivery went out, if it was replaced: the
    /// delivery goes there if it comes back for a retry.
    replaced: Option<Arc<PushConfig>>,
    /// The config was deleted while a delivery was out: that delivery is not retried.
    deleted: bool,
}

/// The owed deliveries the delivery knows of, per config.
#[derive(Default)]
pub(super) struct Mirror {
    lanes: HashMap<Lane, Owed>,
    /// Lanes whose first delivery may be attempted now, none out; each at most once.
    ready: VecDeque<Lane>,
    /// Lanes whose first delivery is due later, by when (stale entries are skipped).
    later: BinaryHeap<Reverse<(Instant, Lane)>>,
    /// Deliveries held (not counting those out).
    rows: usize,
}

impl Mirror {
    /// The owed rows as read from the store (each with when it is due), while the lanes
    /// of `out` have a delivery out: their rows up to that `seq` are passed over (the one
    /// out comes back when its outcome is in), and the rest wait for it.
    pub(super) fn load(
        owed: Vec<(Delivery, Instant)>,
        out: &HashMap<Lane, i64>,
        now: Instant,
    ) -> Self {
        let mut mirror = Mirror::default();
        // Lanes out are known even without rows, for a config change while they are.
        for lane in out.keys() {
            mirror.lanes.entry(lane.clone()).or_default().out = true;
        }
        for (delivery, due) in owed {
            let lane = lane_of(&delivery);
            let busy = out.get(&lane);
            if busy.is_some_and(|seq| delivery.key.seq <= *seq) {
                continue;
            }
            let entry = mirror.lanes.entry(lane).or_default();
            entry.out = busy.is_some();
            entry.rows.push_back((delivery, due));
            mirror.rows += 1;
        }
        let mut lanes: Vec<(&Lane, &mut Owed)> = mirror.lanes.iter_mut().collect();
        // Oldest first, as the store's poll would have them.
        for (_, owed) in lanes.iter_mut() {
            owed.rows.make_contiguous().sort_by_key(|(d, _)| d.key.seq);
        }
        lanes.sort_by_key(|(_, owed)| owed.rows.front().map(|(d, _)| d.created_at));
        let lanes: Vec<Lane> = lanes
            .into_iter()
            .filter(|(_, owed)| !owed.out)
            .map(|(lane, _)| lane.clone())
            .collect();
        for lane in lanes {
            mirror.schedule(lane, now);
        }
        mirror
    }

    /// Deliveries held, not counting those out.
    pub(super) fn len(&self) -> usize {
        self.rows
    }

    /// A delivery committed now: last of its config's.
    pub(super) fn add(&mut self, delivery: Delivery, now: Instant) {
        let lane = lane_of(&delivery);
        let owed = self.lanes.entry(lane.clone()).or_default();
        let first = owed.rows.is_empty() && !owed.out;
        owed.rows.push_back((delivery, now));
        self.rows += 1;
        if first {
            self.ready.push_back(lane);
        }
    }

    /// A config was registered or replaced: what it is owed goes to it as it is now.
    pub(super) fn reconfigure(&mut self, config: &Arc<PushConfig>) {
        let lane = (
            config.tenant.clone(),
            config.task_id.clone(),
            config.id.clone(),
        );
        if let Some(owed) = self.lanes.get_mut(&lane) {
            for (delivery, _) in owed.rows.iter_mut() {
                delivery.config = config.clone();
            }
            if owed.out {
                owed.replaced = Some(config.clone());
            }
        }
    }

    /// A config was deleted, and what it was owed with it: returns how many deliveries
    /// went (one out still comes back, and is dropped then).
    pub(super) fn forget(&mut self, lane: &Lane) -> usize {
        let Entry::Occupied(mut entry) = self.lanes.entry(lane.clone()) else {
            return 0;
        };
        let gone = entry.get().rows.len();
        self.rows -= gone;
        if entry.get().out {
            let owed = entry.get_mut();
            owed.rows.clear();
            owed.deleted = true;
        } else {
            entry.remove();
        }
        gone
    }

    /// The next delivery to attempt, if one is due by `now`: its lane is then out.
    pub(super) fn next(&mut self, now: Instant) -> Option<Delivery> {
        while let Some(Reverse((due, _))) = self.later.peek() {
            if *due > now {
                break;
            }
            let Some(Reverse((due, lane))) = self.later.pop() else {
                break;
            };
            // A lane is listed again whenever its first row's time changes: only the
            // entry that matches it counts.
            if let Some(owed) = self.lanes.get(&lane)
                && !owed.out
                && owed.rows.front().is_some_and(|(_, at)| *at == due)
            {
                self.ready.push_back(lane);
            }
        }
        while let Some(lane) = self.ready.pop_front() {
            let Some(owed) = self.lanes.get_mut(&lane) else {
                continue;
            };
            if owed.out || owed.rows.front().is_none_or(|(_, at)| *at > now) {
                continue;
            }
            let Some((delivery, _)) = owed.rows.pop_front() else {
                continue;
            };
            owed.out = true;
            self.rows -= 1;
            return Some(delivery);
        }
        None
    }

    /// A delivery taken by [`Mirror::next`] goes back to the head of its config's
    /// queue, due at `due` (a retry, a receiver that cannot take it yet, or one that is
    /// busy now: then `due` is now and the lane is listed behind the others) — to the
    /// config as it is now. Returns `false` if its config was deleted meanwhile: the
    /// delivery is dropped (its row went with the config).
    pub(super) fn put_back(&mut self, mut delivery: Delivery, due: Instant, now: Instant) -> bool {
        let lane = lane_of(&delivery);
        let owed = self.lanes.entry(lane.clone()).or_default();
        owed.out = false;
        if std::mem::take(&mut owed.deleted) {
            if owed.rows.is_empty() {
                self.lanes.remove(&lane);
            } else {
                self.schedule(lane, now);
            }
            return false;
        }
        if let Some(config) = owed.replaced.take() {
            delivery.config = config;
        }
        owed.rows.push_front((delivery, due));
        self.rows += 1;
        self.schedule(lane, now);
        true
    }

    /// The delivery out on `lane` is done (delivered, given up, or its config gone).
    pub(super) fn done(&mut self, lane: &Lane, now: Instant) {
        let Entry::Occupied(mut entry) = self.lanes.entry(lane.clone()) else {
            return;
        };
        let owed = entry.get_mut();
        owed.out = false;
        owed.replaced = None;
        owed.deleted = false;
        if entry.get().rows.is_empty() {
            entry.remove();
        } else {
            self.schedule(lane.clone(), now);
        }
    }

    /// When the earliest delivery that is not due yet will be.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.later.peek().map(|Reverse((at, _))| *at)
    }

    /// Lists a lane with no delivery out by its first row's time.
    fn schedule(&mut self, lane: Lane, now: Instant) {
        let Some(due) = self
            .lanes
            .get(&lane)
            .and_then(|owed| owed.rows.front().map(|(_, at)| *at))
        else {
            return;
        };
        if due <= now {
            self.ready.push_back(lane);
        } else {
            self.later.push(Reverse((due, lane)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::{
        ContextId, PushDialect, PushPayload, StreamEvent, TaskId, TaskState, TaskStatus, TenantId,
        Timestamp,
    };
    use crate::store::OutboxKey;

    fn task(id: &str) -> TaskId {
        TaskId::parse(id).expect("a task id")
    }

    fn lane(id: &str) -> Lane {
        (TenantId::default_tenant(), task(id), "c".to_owned())
    }

    fn config(task_id: &str, id: &str) -> Arc<PushConfig> {
        Arc::new(PushConfig {
            tenant: TenantId::default_tenant(),
            task_id: task(task_id),
            id: id.into(),
            url: format!("https://hooks.example.org/{id}"),
            token: None,
            auth: None,
            dialect: PushDialect::V1,
            created_at: Timestamp(1),
        })
    }

    fn row(task_id: &str, id: &str, seq: i64) -> Delivery {
        let config = config(task_id, id);
        Delivery {
            key: OutboxKey {
                tenant: config.tenant.clone(),
                task_id: config.task_id.clone(),
                config_id: config.id.clone(),
                seq,
            },
            payload: PushPayload::Event {
                event: Box::new(StreamEvent::StatusUpdate {
                    task_id: task(task_id),
                    context_id: ContextId::generate(),
                    status: TaskStatus {
                        state: TaskState::Working,
                        message: None,
                        timestamp: Timestamp(seq),
                    },
                    metadata: None,
                }),
            },
            created_at: Timestamp(seq),
            attempts: 0,
            config,
        }
    }

    fn seqs(mirror: &mut Mirror, now: Instant) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        while let Some(d) = mirror.next(now) {
            out.push((d.key.task_id.to_string(), d.key.seq));
        }
        out
    }

    #[test]
    fn one_delivery_of_a_config_at_a_time_in_order_and_configs_side_by_side() {
        let now = Instant::now();
        let mut mirror = Mirror::default();
        for seq in [1, 2, 3] {
            mirror.add(row("a", "c", seq), now);
        }
        mirror.add(row("b", "c", 1), now);
        assert_eq!(mirror.len(), 4);
        // One of each config, oldest config first.
        assert_eq!(seqs(&mut mirror, now), [("a".into(), 1), ("b".into(), 1)]);
        let a = lane("a");
        mirror.done(&a, now);
        assert_eq!(seqs(&mut mirror, now), [("a".into(), 2)]);
        mirror.done(&a, now);
        assert_eq!(seqs(&mut mirror, now), [("a".into(), 3)]);
        mirror.done(&a, now);
        assert_eq!(mirror.len(), 0);
        assert!(mirror.next(now).is_none());
    }

    #[test]
    fn a_delivery_put_back_waits_for_its_time_and_the_rest_of_its_config_behind_it() {
        let now = Instant::now();
        let mut mirror = Mirror::default();
        mirror.add(row("a", "c", 1), now);
        mirror.add(row("a", "c", 2), now);
        let first = mirror.next(now).expect("due");
        let later = now + Duration::from_millis(500);
        mirror.put_back(first, later, now);
        assert_eq!(mirror.len(), 2);
        assert!(mirror.next(now).is_none(), "seq 2 never overtakes seq 1");
        assert_eq!(mirror.next_due(), Some(later));
        assert_eq!(seqs(&mut mirror, later), [("a".into(), 1)]);
    }

    #[test]
    fn a_load_passes_over_what_is_out_and_holds_the_rest_of_its_config() {
        let now = Instant::now();
        let soon = now + Duration::from_secs(1);
        let owed = vec![
            (row("a", "c", 2), now),
            (row("a", "c", 1), now),
            (row("a", "c", 3), now),
            (row("b", "c", 4), soon),
            (row("d", "c", 1), now),
        ];
        let a = lane("a");
        let out = HashMap::from([(a.clone(), 1)]);
        let mut mirror = Mirror::load(owed, &out, now);
        assert_eq!(mirror.len(), 4, "seq 1 of a is out: not held twice");
        assert_eq!(seqs(&mut mirror, now), [("d".into(), 1)]);
        // The delivery that was out ends: a's next follows, in order.
        mirror.done(&a, now);
        assert_eq!(seqs(&mut mirror, now), [("a".into(), 2)]);
        assert_eq!(seqs(&mut mirror, soon), [("b".into(), 4)]);
    }

    #[test]
    fn a_deleted_config_takes_what_it_is_owed_and_a_replaced_one_gets_it() {
        let now = Instant::now();
        let mut mirror = Mirror::default();
        for seq in [1, 2] {
            mirror.add(row("a", "c", seq), now);
            mirror.add(row("b", "c", seq), now);
        }
        let a = lane("a");
        let first = mirror.next(now).expect("a's first");
        assert_eq!(first.key.task_id.as_str(), "a");
        // Deleted while its first is out: the rest goes now, the one out when it ends.
        assert_eq!(mirror.forget(&a), 1);
        mirror.done(&a, now);
        let mut moved = (*config("b", "c")).clone();
        moved.url = "https://elsewhere.example.org/".into();
        mirror.reconfigure(&Arc::new(moved));
        let b = mirror.next(now).expect("b's first");
        assert_eq!(b.config.url, "https://elsewhere.example.org/");
        assert!(mirror.next(now).is_none());
        assert_eq!(mirror.len(), 1);
    }

    #[test]
    fn a_delivery_out_when_its_config_changes_comes_back_to_the_config_as_it_is_now() {
        let now = Instant::now();
        let mut mirror = Mirror::default();
        mirror.add(row("a", "c", 1), now);
        mirror.add(row("b", "c", 1), now);
        let a = mirror.next(now).expect("a's first");
        let b = mirror.next(now).expect("b's first");
        // a's config is pointed elsewhere, b's deleted, while their deliveries are out.
        let mut moved = (*config("a", "c")).clone();
        moved.url = "https://elsewhere.example.org/".into();
        mirror.reconfigure(&Arc::new(moved));
        assert_eq!(mirror.forget(&lane("b")), 0);
        // Both failed: a's retry goes to the new address, b's is dropped.
        assert!(mirror.put_back(a, now, now));
        assert!(!mirror.put_back(b, now, now));
        let again = mirror.next(now).expect("a's retry");
        assert_eq!(again.config.url, "https://elsewhere.example.org/");
        assert!(mirror.next(now).is_none());
        assert_eq!(mirror.len(), 0);
    }

    #[test]
    fn a_lane_out_when_everything_was_read_learns_of_its_config_changing() {
        let now = Instant::now();
        let out = HashMap::from([(lane("a"), 1)]);
        let mut mirror = Mirror::load(Vec::new(), &out, now);
        let mut moved = (*config("a", "c")).clone();
        moved.url = "https://elsewhere.example.org/".into();
        mirror.reconfigure(&Arc::new(moved));
        assert!(mirror.put_back(row("a", "c", 1), now, now));
        let again = mirror.next(now).expect("a's retry");
        assert_eq!(again.config.url, "https://elsewhere.example.org/");
    }
}
