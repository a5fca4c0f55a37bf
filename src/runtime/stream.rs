//! Turns a [`Subscription`] into the ordered event stream a client sees.
//!
//! Live events come from the task's broadcast hub. A subscriber that falls behind the
//! hub's buffer, or that resumes with `Last-Event-ID`, catches up from the durable
//! per-task event log and then continues live — no gap, no duplicate, because every
//! event carries its log sequence number and the stream only moves forward.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::thread::{Live, Subscription};
use crate::domain::{StreamEvent, TaskId, TenantId};
use crate::error::Error;
use crate::store::Store;

/// One event with its id (`seq` in the task's log; 0 for a message-only reply).
pub type SeqEvent = (i64, StreamEvent);

struct State {
    store: Arc<dyn Store>,
    tenant: TenantId,
    task_id: Option<TaskId>,
    first: Option<SeqEvent>,
    live: Option<Live>,
    buffer: VecDeque<SeqEvent>,
    last_seq: i64,
    catch_up: bool,
    replay_batch: usize,
    until_terminal: bool,
    done: bool,
    /// Turns true when the node begins to leave: a stream that follows another node's
    /// task then ends (after what is logged), for its client to resume elsewhere.
    leaving: watch::Receiver<bool>,
}

impl State {
    /// The next event read from the log. The batch's memory is released with its last
    /// event: an idle subscriber holds no buffer (up to `replay_batch` events large).
    fn next_replayed(&mut self) -> Option<SeqEvent> {
        let event = self.buffer.pop_front()?;
        if self.buffer.is_empty() {
            self.buffer = VecDeque::new();
        }
        Some(event)
    }

    fn closes_after(&self, event: &StreamEvent) -> bool {
        if self.until_terminal {
            event.is_final()
        } else {
            event.ends_stream()
        }
    }
}

/// The events of `sub`: its first event, then catch-up from the log, then live events,
/// ending after an event that ends the stream: a terminal status, or for streams opened
/// by a message also an interrupted one. A stream that follows another node's task also
/// ends, after what its log holds, when `leaving` turns true (this node is leaving; the
/// stream's own turn runs elsewhere). The thread actor ends the others.
pub fn events(
    store: Arc<dyn Store>,
    sub: Subscription,
    replay_batch: usize,
    leaving: watch::Receiver<bool>,
) -> impl Stream<Item = Result<SeqEvent, Error>> + Send + 'static {
    // A task of another node: its log may have grown between the snapshot and the
    // notifications' start, so the stream reads it right after its first event.
    let catch_up = sub.first.is_none() || matches!(sub.live, Some(Live::Notified { .. }));
    let state = State {
        store,
        tenant: sub.tenant,
        task_id: sub.task_id,
        first: sub.first,
        live: sub.live,
        buffer: VecDeque::new(),
        last_seq: sub.after_seq,
        catch_up,
        replay_batch,
        until_terminal: sub.until_terminal,
        done: false,
        leaving,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        if let Some(first) = st.first.take() {
            st.done = st.closes_after(&first.1);
            return Some((Ok(first), st));
        }
        loop {
            if let Some(event) = st.next_replayed() {
                st.last_seq = event.0;
                st.done = st.closes_after(&event.1);
                return Some((Ok(event), st));
            }
            if st.catch_up {
                let Some(task_id) = st.task_id.clone() else {
                    st.catch_up = false;
                    continue;
                };
                match st
                    .store
                    .task_events(&st.tenant, &task_id, st.last_seq, st.replay_batch)
                    .await
                {
                    Ok(events) => {
                        if events.len() < st.replay_batch {
                            st.catch_up = false;
                        }
                        st.buffer.extend(events);
                        if st.buffer.is_empty() && st.live.is_none() {
                            return None;
                        }
                        continue;
                    }
                    Err(e) => {
                        st.done = true;
                        return Some((Err(e.into()), st));
                    }
                }
            }
            let rx = match st.live.as_mut()? {
                Live::Hub(rx) => rx,
                Live::Notified { watch, poll } => {
                    // Woken by a notification, or at the poll: either way, read the log.
                    let leaving = tokio::select! {
                        _ = tokio::time::timeout(*poll, watch.changed()) => false,
                        Ok(_) = st.leaving.wait_for(|leaving| *leaving) => true,
                    };
                    if leaving {
                        // What is logged by now is the last this stream reads.
                        st.live = None;
                    }
                    st.catch_up = true;
                    continue;
                }
            };
            match rx.recv().await {
                Ok(event) if event.0 <= st.last_seq => continue,
                // The next event, straight through: nothing is buffered on the live path.
                Ok(event) if event.0 == st.last_seq + 1 => {
                    st.last_seq = event.0;
                    st.done = st.closes_after(&event.1);
                    return Some((Ok((event.0, event.1.clone())), st));
                }
                // Anything else means events were skipped: read them from the log.
                Ok(_) | Err(RecvError::Lagged(_)) => st.catch_up = true,
                Err(RecvError::Closed) => {
                    // The task left memory; whatever was logged after our position is
                    // still owed to this subscriber.
                    st.live = None;
                    st.catch_up = true;
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::StreamExt;
    use tokio::sync::broadcast;

    use super::*;
    use crate::domain::{ContextId, TaskState, TaskStatus, Timestamp};
    use crate::runtime::thread::HubEvent;
    use crate::store::WriteOp;
    use crate::store::testing::SqliteTestStore;

    fn status(task: &TaskId, state: TaskState, at: i64) -> StreamEvent {
        StreamEvent::StatusUpdate {
            task_id: task.clone(),
            context_id: ContextId::parse("ctx").unwrap(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: Timestamp(at),
            },
            metadata: None,
        }
    }

    /// Logs the events and publishes them to `hub`, as a thread actor does.
    async fn publish(
        store: &Arc<dyn Store>,
        hub: &broadcast::Sender<HubEvent>,
        tenant: &TenantId,
        task: &TaskId,
        events: &[(i64, StreamEvent)],
    ) {
        for (seq, event) in events {
            store
                .commit(&[WriteOp::AppendTaskEvent {
                    tenant: tenant.clone(),
                    task_id: task.clone(),
                    seq: *seq,
                    event: event.clone(),
                    created_at: Timestamp(*seq),
                }])
                .await
                .unwrap();
            let _ = hub.send(HubEvent::new((*seq, event.clone())));
        }
    }

    #[tokio::test]
    async fn a_lagging_subscriber_catches_up_from_the_log_without_gaps_or_duplicates() {
        let db = SqliteTestStore::open().await;
        let tenant = TenantId::default_tenant();
        let task = TaskId::parse("t-1").unwrap();
        // A one-event buffer: publishing three events before the subscriber reads makes
        // it lag; the catch-up reads one event at a time (replay batch 1).
        let (hub, live) = broadcast::channel(1);
        // As after a snapshot: the stream starts live, at seq 0, not from the log.
        let snapshot = (0, status(&task, TaskState::Submitted, 0));
        let sub = Subscription {
            tenant: tenant.clone(),
            task_id: Some(task.clone()),
            first: Some(snapshot.clone()),
            live: Some(Live::Hub(live)),
            after_seq: 0,
            until_terminal: true,
        };
        let events = vec![
            (1, status(&task, TaskState::Working, 1)),
            (2, status(&task, TaskState::InputRequired, 2)),
            (3, status(&task, TaskState::Working, 3)),
        ];
        publish(&db.store, &hub, &tenant, &task, &events).await;
        let mut stream = Box::pin(super::events(
            db.store.clone(),
            sub,
            1,
            watch::channel(false).1,
        ));
        assert_eq!(stream.next().await.unwrap().unwrap(), snapshot);
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(stream.next().await.unwrap().unwrap());
        }
        assert_eq!(
            seen, events,
            "lagged, then caught up from the log, in order"
        );
        // Live again: the next event arrives through the hub and ends the stream.
        let last = vec![(4, status(&task, TaskState::Completed, 4))];
        publish(&db.store, &hub, &tenant, &task, &last).await;
        assert_eq!(stream.next().await.unwrap().unwrap(), last[0]);
        assert!(
            stream.next().await.is_none(),
            "closed after the terminal event"
        );
    }

    #[tokio::test]
    async fn a_drained_replay_batch_leaves_no_buffer_behind() {
        let db = SqliteTestStore::open().await;
        let task = TaskId::parse("t-3").unwrap();
        let mut state = State {
            store: db.store.clone(),
            tenant: TenantId::default_tenant(),
            task_id: Some(task.clone()),
            first: None,
            live: None,
            buffer: VecDeque::new(),
            last_seq: 0,
            catch_up: false,
            replay_batch: 1000,
            until_terminal: true,
            done: false,
            leaving: watch::channel(false).1,
        };
        state.buffer.extend([
            (1, status(&task, TaskState::Working, 1)),
            (2, status(&task, TaskState::InputRequired, 2)),
        ]);
        assert_eq!(state.next_replayed().map(|e| e.0), Some(1));
        assert!(state.buffer.capacity() > 0, "one event still owed");
        assert_eq!(state.next_replayed().map(|e| e.0), Some(2));
        assert_eq!(
            state.buffer.capacity(),
            0,
            "a subscriber waiting for live events keeps no buffer"
        );
        assert!(state.next_replayed().is_none());
    }

    #[tokio::test]
    async fn a_stream_opened_by_a_message_ends_at_an_interrupted_state() {
        let db = SqliteTestStore::open().await;
        let tenant = TenantId::default_tenant();
        let task = TaskId::parse("t-2").unwrap();
        let (hub, live) = broadcast::channel(8);
        let sub = Subscription {
            tenant: tenant.clone(),
            task_id: Some(task.clone()),
            first: None,
            live: Some(Live::Hub(live)),
            after_seq: 0,
            until_terminal: false,
        };
        let events = vec![
            (1, status(&task, TaskState::Working, 1)),
            (2, status(&task, TaskState::InputRequired, 2)),
        ];
        publish(&db.store, &hub, &tenant, &task, &events).await;
        let seen: Vec<_> = super::events(db.store.clone(), sub, 10, watch::channel(false).1)
            .map(|e| e.unwrap())
            .collect()
            .await;
        assert_eq!(seen, events);
    }
}
