//! Sending a message: [`Sends::send`] and [`Sends::streaming`] route it to its
//! thread and queue its turn there (or forward it to the thread's owner in a cluster), and
//! idempotent sends — a retry of a key used within the window rejoins the first send's
//! outcome instead of running anything.

use dashmap::DashMap;
use tokio::sync::{oneshot, watch};

use crate::cluster::forward::{self, SendMode, Sent, StreamStart};
use crate::domain::{ContextId, SendMessage, SendOutcome, TaskId, TenantId};
use crate::error::{Error, Result};

use super::routing::{Located, Origin, not_the_owner};
use super::thread::rejoin::Rejoin;
use super::thread::{self, Mode, SendTurn, Subscription, ThreadKey, TurnClaim, Waiter};
use super::{Runtime, idempotency, lifecycle};

/// A turn started here, or the owner that must run it.
pub(super) enum Started<T> {
    Here(T),
    Elsewhere(crate::store::cluster::Owner, Box<SendMessage>),
}

impl<T> Started<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Started<U> {
        match self {
            Started::Here(value) => Started::Here(f(value)),
            Started::Elsewhere(owner, cmd) => Started::Elsewhere(owner, cmd),
        }
    }
}

/// Sending messages ([`Runtime::sends`]).
#[derive(Clone, Copy)]
pub struct Sends<'a>(&'a Runtime);

impl Runtime {
    /// Sending messages: a blocking or immediate send, a streamed one, and the sends
    /// another node forwards to this one.
    pub fn sends(&self) -> Sends<'_> {
        Sends(self)
    }
}

impl Sends<'_> {
    /// Runs a turn and answers when the task is terminal or interrupted — or at once
    /// with `return_immediately`. Refused once a graceful shutdown has begun. In a
    /// cluster, a thread of another node is served there.
    pub async fn send(self, tenant: &TenantId, cmd: SendMessage) -> Result<SendOutcome> {
        let mode = if cmd.config.return_immediately {
            Mode::Immediate
        } else {
            Mode::Blocking
        };
        let history_length = cmd.config.history_length;
        let started = self
            .0
            .start_turn(tenant, cmd, mode, Origin::Client, |tx| Waiter::Outcome {
                tx,
                history_length,
            })
            .await?;
        match started {
            Started::Here(outcome) => Ok(outcome),
            Started::Elsewhere(owner, cmd) => {
                let mode = match mode {
                    Mode::Immediate => SendMode::Immediate,
                    _ => SendMode::Blocking,
                };
                match self.0.forward_send(&owner, tenant, *cmd, mode).await? {
                    Sent::Outcome(outcome) => Ok(outcome),
                    Sent::Stream(_) => Err(Error::internal("a stream answered a blocking send")),
                }
            }
        }
    }

    /// Runs a turn and returns its live events.
    pub async fn streaming(self, tenant: &TenantId, cmd: SendMessage) -> Result<Subscription> {
        let started = self
            .0
            .start_turn(tenant, cmd, Mode::Streaming, Origin::Client, Waiter::Stream)
            .await?;
        match started {
            Started::Here(sub) => Ok(sub),
            Started::Elsewhere(owner, cmd) => {
                match self
                    .0
                    .forward_send(&owner, tenant, *cmd, SendMode::Streaming)
                    .await?
                {
                    Sent::Stream(start) => Ok(self.0.follow(tenant, start)),
                    Sent::Outcome(_) => Err(Error::internal("an outcome answered a stream")),
                }
            }
        }
    }

    /// Serves a send another node forwarded to this one, the thread's owner.
    pub async fn serve(self, tenant: &TenantId, cmd: SendMessage, mode: SendMode) -> Result<Sent> {
        let history_length = cmd.config.history_length;
        let started = match mode {
            SendMode::Blocking | SendMode::Immediate => {
                let mode = if mode == SendMode::Immediate {
                    Mode::Immediate
                } else {
                    Mode::Blocking
                };
                self.0
                    .start_turn(tenant, cmd, mode, Origin::Peer, |tx| Waiter::Outcome {
                        tx,
                        history_length,
                    })
                    .await?
                    .map(Sent::Outcome)
            }
            SendMode::Streaming => self
                .0
                .start_turn(tenant, cmd, Mode::Streaming, Origin::Peer, Waiter::Stream)
                .await?
                .map(|sub| {
                    Sent::Stream(StreamStart {
                        task_id: sub.task_id,
                        first: sub.first,
                        after_seq: sub.after_seq,
                        until_terminal: sub.until_terminal,
                    })
                }),
        };
        match started {
            Started::Here(sent) => Ok(sent),
            Started::Elsewhere(owner, _) => Err(not_the_owner(&owner)),
        }
    }
}

impl Runtime {
    async fn forward_send(
        &self,
        owner: &crate::store::cluster::Owner,
        tenant: &TenantId,
        cmd: SendMessage,
        mode: SendMode,
    ) -> Result<Sent> {
        let call = forward::SendCall {
            tenant: tenant.clone(),
            cmd,
            mode,
        };
        self.forward(owner, "send", &call).await
    }

    /// A subscription that follows, through its log, a task whose turn another node runs.
    fn follow(&self, tenant: &TenantId, start: StreamStart) -> Subscription {
        let live = match (&self.cluster, &start.task_id) {
            (Some(cluster), Some(task_id)) => Some(thread::Live::Notified {
                watch: cluster.hub().watch(tenant, task_id),
                poll: cluster.stream_poll(),
            }),
            _ => None,
        };
        Subscription {
            tenant: tenant.clone(),
            task_id: start.task_id,
            first: start.first,
            live,
            after_seq: start.after_seq,
            until_terminal: start.until_terminal,
        }
    }

    /// Routes `cmd` to its thread, queues the turn there with a waiter built by
    /// `waiter`, and waits for what the waiter receives.
    ///
    /// A send whose idempotency key (the message's id, or the request's
    /// `Idempotency-Key`) the tenant used within `idempotency.window_secs` runs nothing:
    /// it gets the outcome of the first send of that key — or an error if it differs from
    /// it. The key is claimed in the store with the turn's first write, under a unique
    /// key: of two racing sends, one wins and the other joins it.
    async fn start_turn<T>(
        &self,
        tenant: &TenantId,
        cmd: SendMessage,
        mode: Mode,
        origin: Origin,
        waiter: impl Fn(oneshot::Sender<Result<T>>) -> Waiter,
    ) -> Result<Started<T>> {
        // Counted before the check, so that a shutdown that begins now waits for it.
        let busy = self.shared.activity.busy();
        if self.lifecycle().is_draining() {
            match origin {
                // A thread another node serves: the send goes there, as it came.
                Origin::Client => {
                    if let Some(owner) = self.served_elsewhere(tenant, &cmd).await {
                        return Ok(Started::Elsewhere(owner, Box::new(cmd)));
                    }
                }
                Origin::Peer => self.hand_over(tenant, &cmd).await,
            }
            return Err(thread::maintenance::shutting_down());
        }
        self.lifecycle().serving_writes()?;
        // Routing fills in the context a message did not name; a send that goes on to
        // another node goes as the client sent it (`as_sent`), so that every node hashes
        // the same message when it compares a retry with it.
        let named = cmd.message.context_id.is_some();
        if !self.settings.idempotency {
            let (key, cmd, fresh) = self.route(tenant, cmd).await?;
            let token = match self.locate(&key, fresh).await? {
                Located::Here(token) => token,
                Located::Elsewhere(owner) => {
                    return elsewhere(origin, owner, as_sent(cmd, named));
                }
            };
            let rx = self
                .queue_turn(&key, fresh, token, &busy, &waiter, (cmd, mode, None))
                .await?;
            return await_reply(Some(rx)).await.map(Started::Here);
        }
        let idem = (tenant.clone(), cmd.idempotency_key().to_owned());
        let digest = idempotency::digest(&cmd);
        if let Some(first) = self.accepted(&idem, &digest).await? {
            return self.rejoin(tenant, first, mode, origin, cmd, &waiter).await;
        }
        let (key, cmd, fresh) = self.route(tenant, cmd).await?;
        let token = match self.locate(&key, fresh).await? {
            Located::Here(token) => token,
            Located::Elsewhere(owner) => return elsewhere(origin, owner, as_sent(cmd, named)),
        };
        let now = crate::domain::Timestamp::now();
        let mut claim = TurnClaim {
            key: idem.1.clone(),
            digest: digest.clone(),
            task_id: cmd.message.task_id.clone().unwrap_or_else(TaskId::generate),
            at: now,
            taken_over_before: crate::domain::Timestamp(
                now.millis()
                    .saturating_sub(self.settings.idempotency_window_ms),
            ),
            known_unclaimed: false,
        };
        // Tells retries that joined the turn before it was queued when it is.
        let (queued, queued_rx) = watch::channel(None);
        let accepted = Accepted {
            context_id: key.context_id.clone(),
            task_id: claim.task_id.clone(),
            digest,
            reply: None,
            queued: Some(queued_rx),
        };
        // Registered before the turn is queued: a retry from now on joins it. (The map's
        // lock is released before anything is awaited.) The key was looked up before
        // routing, which is awaited: a send of the same key may have run its whole turn
        // since. If the claim filter still rules the key out, none did (each inserts its
        // key here, before its claim is written) and the store need not look again;
        // otherwise the store's own check, in the commit, decides.
        let raced = match self.claims.entry(idem.clone()) {
            dashmap::Entry::Occupied(first) => Some(first.get().clone()),
            dashmap::Entry::Vacant(slot) => {
                slot.insert(accepted);
                if let Some(filter) = &self.claim_filter {
                    claim.known_unclaimed = !filter.may_be_claimed(tenant, &idem.1, now.millis());
                    filter.insert(tenant, &idem.1, now.millis());
                }
                None
            }
        };
        if let Some(first) = raced {
            first.check(&idem.1, &claim.digest)?;
            let cmd = as_sent(cmd, named);
            return self.rejoin(tenant, first, mode, origin, cmd, &waiter).await;
        }
        let _accepted = Forget(&self.claims, &idem);
        let retry = as_sent(cmd.clone(), named);
        let sent = self
            .queue_turn(
                &key,
                fresh,
                token,
                &busy,
                &waiter,
                (cmd, mode, Some(claim.clone())),
            )
            .await;
        queued.send_replace(Some(sent.is_ok()));
        let outcome = match sent {
            Ok(rx) => await_reply(Some(rx)).await,
            Err(e) => Err(e),
        };
        // Another process (or a send this one forgot) claimed the key first: its outcome
        // is this send's too, once it is in the store (one read tells).
        if let Err(Error::Unavailable { .. }) = &outcome {
            drop(_accepted);
            match self.accepted(&idem, &claim.digest).await {
                Ok(Some(first)) => {
                    return self
                        .rejoin(tenant, first, mode, origin, retry, &waiter)
                        .await;
                }
                Err(e @ Error::InvalidParams(_)) => return Err(e),
                Ok(None) | Err(_) => {}
            }
        }
        outcome.map(Started::Here)
    }

    /// Queues a turn in its thread; its outcome arrives on the returned channel.
    async fn queue_turn<T>(
        &self,
        key: &ThreadKey,
        fresh: bool,
        token: Option<i64>,
        busy: &lifecycle::shutdown::Busy,
        waiter: &impl Fn(oneshot::Sender<Result<T>>) -> Waiter,
        (cmd, mode, claim): (SendMessage, Mode, Option<TurnClaim>),
    ) -> Result<oneshot::Receiver<Result<T>>> {
        let mut rx = None;
        self.registry
            .call_new(key, fresh, token, || {
                // A retry (the first actor was evicted) needs a fresh channel.
                let (tx, wait) = oneshot::channel();
                rx = Some(wait);
                SendTurn {
                    cmd: cmd.clone(),
                    mode,
                    waiter: waiter(tx),
                    busy: busy.clone(),
                    claim: claim.clone(),
                    span: if crate::telemetry::trace::on() {
                        tracing::Span::current()
                    } else {
                        tracing::Span::none()
                    },
                }
            })
            .await?;
        rx.ok_or_else(|| Error::internal("no reply channel"))
    }

    /// The first send of `idem` if it is still remembered: in flight in this process, or
    /// claimed in the store within the window. A different message under the key is
    /// refused.
    async fn accepted(&self, idem: &(TenantId, String), digest: &str) -> Result<Option<Accepted>> {
        if let Some(first) = self.claims.get(idem).map(|a| a.clone()) {
            first.check(&idem.1, digest)?;
            return Ok(Some(first));
        }
        let now = crate::domain::Timestamp::now().millis();
        if let Some(filter) = &self.claim_filter
            && !filter.may_be_claimed(&idem.0, &idem.1, now)
        {
            return Ok(None);
        }
        metrics::counter!(crate::telemetry::IDEMPOTENCY_KEY_READS).increment(1);
        let stored = match self.store.claim_inline(&idem.0, &idem.1) {
            Some(read) => read?,
            None => self.store.claim(&idem.0, &idem.1).await?,
        };
        let Some(claim) = stored else {
            return Ok(None);
        };
        let window_start = now.saturating_sub(self.settings.idempotency_window_ms);
        if claim.created_at.millis() < window_start {
            return Ok(None);
        }
        let first = Accepted {
            context_id: claim.context_id,
            task_id: claim.task_id,
            digest: claim.digest,
            reply: claim.reply,
            queued: None,
        };
        first.check(&idem.1, digest)?;
        Ok(Some(first))
    }

    /// Gives a retry the outcome of the first send: its reply, or its task's outcome
    /// through the task's thread (in a cluster, on the node that serves it: `cmd` goes
    /// there).
    pub(super) async fn rejoin<T>(
        &self,
        tenant: &TenantId,
        first: Accepted,
        mode: Mode,
        origin: Origin,
        cmd: SendMessage,
        waiter: &impl Fn(oneshot::Sender<Result<T>>) -> Waiter,
    ) -> Result<Started<T>> {
        if let Some(reply) = &first.reply {
            metrics::counter!(crate::telemetry::IDEMPOTENT_REPLAYS).increment(1);
            let (tx, rx) = oneshot::channel();
            thread::control::resolve_with_message(waiter(tx), reply, tenant);
            return await_reply(Some(rx)).await.map(Started::Here);
        }
        // A first send still on its way to its thread: the retry follows it there.
        if let Some(mut queued) = first.queued.clone() {
            let started = queued.wait_for(Option::is_some).await.ok().and_then(|q| *q);
            if started != Some(true) {
                return Err(Error::Unavailable {
                    detail: "the first request with this idempotency key did not start".into(),
                    retry_after_secs: 1,
                });
            }
        }
        let key = ThreadKey {
            tenant: tenant.clone(),
            context_id: first.context_id,
        };
        let token = match self.locate(&key, false).await? {
            Located::Here(token) => token,
            Located::Elsewhere(owner) => return elsewhere(origin, owner, cmd),
        };
        metrics::counter!(crate::telemetry::IDEMPOTENT_REPLAYS).increment(1);
        let mut rx = None;
        self.registry
            .call_new(&key, false, token, || {
                let (tx, wait) = oneshot::channel();
                rx = Some(wait);
                Rejoin {
                    task_id: first.task_id.clone(),
                    message_id: cmd.message.message_id.clone(),
                    unconfirmed: first.queued.is_some(),
                    mode,
                    waiter: waiter(tx),
                }
            })
            .await?;
        await_reply(rx).await.map(Started::Here)
    }
}

/// What a retry needs of the first send of its key.
#[derive(Debug, Clone)]
pub(super) struct Accepted {
    context_id: ContextId,
    task_id: TaskId,
    digest: String,
    reply: Option<crate::domain::Message>,
    /// Of a send of this process: whether its turn was queued in its thread (`None`
    /// until it is known).
    queued: Option<watch::Receiver<Option<bool>>>,
}

impl Accepted {
    /// The first send of `cmd`, to the task `task_id`, as this process holds it while
    /// it is in flight (its turn queued).
    #[cfg(test)]
    pub(super) fn in_flight(cmd: &SendMessage, task_id: TaskId) -> Self {
        let context_id = cmd
            .message
            .context_id
            .clone()
            .expect("a message of a thread");
        Self {
            context_id,
            task_id,
            digest: idempotency::digest(cmd),
            reply: None,
            queued: Some(watch::channel(Some(true)).1),
        }
    }

    /// A retry must send what the first send sent.
    fn check(&self, key: &str, digest: &str) -> Result<()> {
        if self.digest == digest {
            return Ok(());
        }
        Err(Error::invalid_params(format!(
            "messageId {key:?} was already used for a different message within \
             idempotency.window_secs; a retry must send the same message, and a new \
             message needs a new messageId"
        )))
    }
}

/// Forgets an in-flight key when its send has answered (or was dropped): by then the
/// store holds its claim, or the turn was refused and left nothing behind.
struct Forget<'a>(
    &'a DashMap<(TenantId, String), Accepted, foldhash::fast::RandomState>,
    &'a (TenantId, String),
);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// `cmd` as the client sent it: without the context routing filled in when the message
/// named none (`named`). The node it goes to routes it again, to the same thread.
fn as_sent(mut cmd: SendMessage, named: bool) -> SendMessage {
    if !named {
        cmd.message.context_id = None;
    }
    cmd
}

/// A client's send goes to the thread's owner; a forwarded one found this node is not
/// the owner (any more): the forwarding node looks again on the client's retry.
fn elsewhere<T>(
    origin: Origin,
    owner: crate::store::cluster::Owner,
    cmd: SendMessage,
) -> Result<Started<T>> {
    match origin {
        Origin::Client => Ok(Started::Elsewhere(owner, Box::new(cmd))),
        Origin::Peer => Err(not_the_owner(&owner)),
    }
}

async fn await_reply<T>(rx: Option<oneshot::Receiver<Result<T>>>) -> Result<T> {
    let rx = rx.ok_or_else(|| Error::internal("no reply channel"))?;
    rx.await
        .map_err(|_| Error::internal("the thread actor dropped a request"))?
}
