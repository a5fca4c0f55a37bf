//! The write path of a turn against a real SQLite store that counts its commits and can
//! refuse any one of them (a database cut at that commit point): how many commits a turn
//! costs, and that a refused request leaves nothing behind — the store holds exactly what
//! it held before, and the same message sent again works.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use super::super::{AgentExecutor, ExecutorSource, Runtime, Turn, TurnSink};
use crate::config::Settings;
use crate::domain::{
    Artifact, ContextId, ListTasksQuery, Message, Part, Role, SendConfig, SendMessage, SendOutcome,
    StreamEvent, Task, TaskId, TaskPage, TaskState, TenantId, Timestamp,
};
use crate::error::Error;
use crate::skills::SkillRegistry;
use crate::store::testing::SqliteTestStore;
use crate::store::{
    BlockingCommit, Census, DueThread, Store, StoreError, StoredTask, ThreadSnapshot, WriteOp,
};

/// Counts commits and refuses the `fail_at`-th one (1-based; 0: none) with
/// `Unavailable`, writing nothing, as a database that went away would.
struct CutStore {
    inner: Arc<dyn Store>,
    commits: AtomicUsize,
    fail_at: AtomicUsize,
    /// Reads of a claim (`claim`, `claim_inline`).
    claim_reads: AtomicUsize,
    /// `known_unclaimed` of each claim committed, in order.
    vouched: std::sync::Mutex<Vec<bool>>,
    /// Reads of every owed delivery never answer; `owed_read` tells one began.
    owed_reads_hang: std::sync::atomic::AtomicBool,
    owed_read: tokio::sync::Notify,
}

impl CutStore {
    fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            commits: AtomicUsize::new(0),
            fail_at: AtomicUsize::new(0),
            claim_reads: AtomicUsize::new(0),
            vouched: Default::default(),
            owed_reads_hang: Default::default(),
            owed_read: Default::default(),
        })
    }

    /// Whether the last claim committed was vouched for as unclaimed.
    fn last_vouched(&self) -> Option<bool> {
        self.vouched.lock().unwrap().last().copied()
    }

    /// Refuses the `n`-th commit from now (1: the next one).
    fn cut_at(&self, n: usize) {
        self.fail_at
            .store(self.commits.load(Ordering::SeqCst) + n, Ordering::SeqCst);
    }

    fn commits(&self) -> usize {
        self.commits.load(Ordering::SeqCst)
    }

    fn claim_reads(&self) -> usize {
        self.claim_reads.load(Ordering::SeqCst)
    }

    /// Counts a commit; `Err` when this is the one to refuse. Empty batches (the
    /// shutdown flush) are not commits.
    fn admit(&self, ops: &[WriteOp]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.fail_at.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("cut by the test".into()));
        }
        for op in ops {
            if let WriteOp::ClaimKey(claim) = op {
                self.vouched.lock().unwrap().push(claim.known_unclaimed);
            }
        }
        Ok(())
    }
}

struct CutWriter {
    cut: Arc<CutStore>,
    inner: Arc<dyn BlockingCommit>,
}

impl BlockingCommit for CutWriter {
    fn commit_blocking(&self, batches: &[&[WriteOp]]) -> Result<(), StoreError> {
        let ops: Vec<WriteOp> = batches.iter().flat_map(|b| b.iter().cloned()).collect();
        self.cut.admit(&ops)?;
        self.inner.commit_blocking(batches)
    }
}

/// The store the runtime gets: every call goes to the `CutStore`'s inner store, commits
/// through `admit` first.
struct Handle(Arc<CutStore>);

#[async_trait]
impl Store for Handle {
    fn backend(&self) -> &'static str {
        self.0.inner.backend()
    }
    async fn commit(&self, ops: &[WriteOp]) -> Result<(), StoreError> {
        self.0.admit(ops)?;
        self.0.inner.commit(ops).await
    }
    fn blocking_commit(&self) -> Option<Arc<dyn BlockingCommit>> {
        let inner = self.0.inner.blocking_commit()?;
        Some(Arc::new(CutWriter {
            cut: self.0.clone(),
            inner,
        }))
    }
    async fn load_thread(
        &self,
        tenant: &TenantId,
        thread_id: &ContextId,
        window: usize,
    ) -> Result<Option<ThreadSnapshot>, StoreError> {
        self.0.inner.load_thread(tenant, thread_id, window).await
    }
    async fn task_context(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
    ) -> Result<Option<ContextId>, StoreError> {
        self.0.inner.task_context(tenant, task_id).await
    }
    async fn load_task(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
    ) -> Result<Option<StoredTask>, StoreError> {
        self.0.inner.load_task(tenant, task_id).await
    }
    async fn list_tasks(
        &self,
        tenant: &TenantId,
        query: &ListTasksQuery,
    ) -> Result<Option<TaskPage>, StoreError> {
        self.0.inner.list_tasks(tenant, query).await
    }
    async fn task_events(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<(i64, StreamEvent)>, StoreError> {
        self.0
            .inner
            .task_events(tenant, task_id, after_seq, limit)
            .await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.0.inner.ping().await
    }
    async fn census(&self, now: Timestamp) -> Result<Census, StoreError> {
        self.0.inner.census(now).await
    }
    async fn refresh_statistics(&self) -> Result<Vec<&'static str>, StoreError> {
        self.0.inner.refresh_statistics().await
    }
    async fn due_threads(
        &self,
        status: crate::store::ThreadStatus,
        now: Timestamp,
        after: Option<&DueThread>,
        limit: usize,
    ) -> Result<Vec<DueThread>, StoreError> {
        self.0.inner.due_threads(status, now, after, limit).await
    }
    async fn recent_threads(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(TenantId, ContextId)>, StoreError> {
        self.0.inner.recent_threads(now, limit).await
    }
    async fn push_configs(
        &self,
        tenant: &TenantId,
        task_ids: &[TaskId],
    ) -> Result<Vec<crate::domain::PushConfig>, StoreError> {
        self.0.inner.push_configs(tenant, task_ids).await
    }
    async fn owed_deliveries(
        &self,
        limit: usize,
    ) -> Result<Vec<(crate::store::Delivery, Timestamp)>, StoreError> {
        if self.0.owed_reads_hang.load(Ordering::SeqCst) {
            self.0.owed_read.notify_one();
            std::future::pending::<()>().await;
        }
        self.0.inner.owed_deliveries(limit).await
    }
    async fn due_deliveries(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<crate::store::Delivery>, StoreError> {
        self.0.inner.due_deliveries(now, limit).await
    }
    async fn outbox_depth(&self) -> Result<u64, StoreError> {
        self.0.inner.outbox_depth().await
    }
    async fn claim(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<crate::store::Claim>, StoreError> {
        self.0.claim_reads.fetch_add(1, Ordering::SeqCst);
        self.0.inner.claim(tenant, key).await
    }
    async fn claim_keys(
        &self,
        from: crate::domain::Timestamp,
        until: Option<crate::domain::Timestamp>,
        limit: Option<usize>,
    ) -> Result<Vec<(TenantId, String, crate::domain::Timestamp)>, StoreError> {
        self.0.inner.claim_keys(from, until, limit).await
    }
    fn claim_inline(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Option<Result<Option<crate::store::Claim>, StoreError>> {
        let read = self.0.inner.claim_inline(tenant, key);
        if read.is_some() {
            self.0.claim_reads.fetch_add(1, Ordering::SeqCst);
        }
        read
    }
}

/// `done`: completes at once. `input`: asks for more. `steps`: working, an artifact,
/// completed (three outputs). `hi`: answers with a message. `wait`: completes once
/// released. A continuation completes.
#[derive(Default)]
struct Script {
    release: tokio::sync::Notify,
}

#[async_trait]
impl AgentExecutor for Script {
    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<(), Error> {
        if turn.continuation {
            return sink.complete(Some(sink.text("continued"))).await;
        }
        match turn.message.text().as_str() {
            "wait" => {
                self.release.notified().await;
                sink.complete(None).await
            }
            "input" => sink.input_required(sink.text("more, please")).await,
            "steps" => {
                sink.working().await?;
                sink.artifact(Artifact::new(vec![Part::text("a")]), false, true)
                    .await?;
                sink.complete(None).await
            }
            "hi" => sink.reply(sink.text("hello")).await,
            _ => sink.complete(Some(sink.text("done"))).await,
        }
    }
}

struct Fixture {
    script: Arc<Script>,
    cut: Arc<CutStore>,
    runtime: Runtime,
    tenant: TenantId,
    _store: SqliteTestStore,
}

impl Fixture {
    async fn new() -> Self {
        Self::with(&Settings::default(), SqliteTestStore::open().await)
    }

    /// A runtime with `settings` on `store`.
    fn with(settings: &Settings, store: SqliteTestStore) -> Self {
        let cut = CutStore::new(store.store.clone());
        let script = Arc::new(Script::default());
        let runtime = Runtime::start(
            settings,
            Arc::new(Handle(cut.clone())),
            ExecutorSource::Custom(script.clone()),
            &SkillRegistry::default(),
            None,
        )
        .expect("runtime starts");
        Self {
            script,
            cut,
            runtime,
            tenant: TenantId::default_tenant(),
            _store: store,
        }
    }

    /// Stops the runtime; its store stays for the next one.
    async fn restart(self, settings: &Settings) -> Self {
        self.runtime.lifecycle().shutdown();
        drop(self.cut);
        Self::with(settings, self._store.reopen().await)
    }

    async fn send(&self, message: &Message) -> Result<SendOutcome, Error> {
        let cmd = SendMessage {
            message: message.clone(),
            config: SendConfig::default(),
            metadata: None,
            create_missing_task: false,
            idempotency_key: None,
        };
        self.runtime.sends().send(&self.tenant, cmd).await
    }

    /// What the store holds of a thread: (message seq, role, text) in order, and its
    /// tasks with their states and history lengths.
    async fn stored(&self, context_id: &ContextId) -> (Vec<(i64, String, String)>, Vec<Task>) {
        let store = &self.cut.inner;
        let messages = match store.load_thread(&self.tenant, context_id, 100).await {
            Ok(Some(snapshot)) => snapshot
                .recent
                .into_iter()
                .map(|m| (m.seq, m.role, m.content))
                .collect(),
            Ok(None) => Vec::new(),
            Err(e) => panic!("load_thread: {e}"),
        };
        let page = store
            .list_tasks(
                &self.tenant,
                &ListTasksQuery {
                    context_id: Some(context_id.clone()),
                    page_size: 100,
                    history_length: None,
                    ..ListTasksQuery::default()
                },
            )
            .await
            .expect("list_tasks")
            .expect("a page");
        (messages, page.tasks)
    }
}

fn user(text: &str, context_id: &ContextId, task_id: Option<&TaskId>) -> Message {
    Message {
        role: Role::User,
        ..Message::agent(context_id.clone(), task_id.cloned(), vec![Part::text(text)])
    }
}

fn task(outcome: Result<SendOutcome, Error>) -> Task {
    match outcome {
        Ok(SendOutcome::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

fn is_unavailable(outcome: &Result<SendOutcome, Error>) -> bool {
    matches!(outcome, Err(Error::Unavailable { .. }))
}

#[actix_web::test]
async fn a_turn_that_completes_at_once_costs_one_commit() {
    let f = Fixture::new().await;
    let context = ContextId::generate();
    let before = f.cut.commits();
    let done = task(f.send(&user("done", &context, None)).await);
    assert_eq!(done.status.state, TaskState::Completed);
    assert_eq!(
        f.cut.commits() - before,
        1,
        "the start rides with the completion"
    );

    // A message answer, and a follow-up that completes at once: one commit each too.
    let before = f.cut.commits();
    let reply = f.send(&user("hi", &context, None)).await;
    assert!(matches!(reply, Ok(SendOutcome::Message(_))), "{reply:?}");
    assert_eq!(f.cut.commits() - before, 1);
    let asked = task(f.send(&user("input", &context, None)).await);
    assert_eq!(asked.status.state, TaskState::InputRequired);
    let before = f.cut.commits();
    let continued = task(f.send(&user("more", &context, Some(&asked.id))).await);
    assert_eq!(continued.status.state, TaskState::Completed);
    assert_eq!(f.cut.commits() - before, 1);

    // Three outputs: three commits, the first carrying the start.
    let before = f.cut.commits();
    let steps = task(f.send(&user("steps", &context, None)).await);
    assert_eq!(steps.status.state, TaskState::Completed);
    assert_eq!(f.cut.commits() - before, 3);
    f.runtime.lifecycle().shutdown();
}

#[actix_web::test]
async fn a_new_task_refused_at_its_commit_leaves_nothing_and_can_be_sent_again() {
    let f = Fixture::new().await;
    let context = ContextId::generate();
    let message = user("done", &context, None);
    f.cut.cut_at(1);
    let refused = f.send(&message).await;
    assert!(is_unavailable(&refused), "{refused:?}");
    let (messages, tasks) = f.stored(&context).await;
    assert!(messages.is_empty(), "orphan messages: {messages:?}");
    assert!(tasks.is_empty());

    // The very same message again: stored once, answered once.
    let done = task(f.send(&message).await);
    assert_eq!(done.status.state, TaskState::Completed);
    let (messages, tasks) = f.stored(&context).await;
    assert_eq!(
        messages,
        vec![
            (1, "user".to_owned(), "done".to_owned()),
            (2, "agent".to_owned(), "done".to_owned())
        ]
    );
    assert_eq!(tasks.len(), 1);
    f.runtime.lifecycle().shutdown();
}

#[actix_web::test]
async fn a_follow_up_refused_at_its_commit_leaves_the_task_as_it_was() {
    let f = Fixture::new().await;
    let context = ContextId::generate();
    let asked = task(f.send(&user("input", &context, None)).await);
    let before = f.stored(&context).await;
    assert_eq!(before.1[0].status.state, TaskState::InputRequired);

    let follow_up = user("more", &context, Some(&asked.id));
    f.cut.cut_at(1);
    let refused = f.send(&follow_up).await;
    assert!(is_unavailable(&refused), "{refused:?}");
    assert_eq!(f.stored(&context).await, before, "the store is as it was");
    // Read through the runtime too: the actor forgot the refused turn.
    let seen = f
        .runtime
        .tasks()
        .get(&f.tenant, &asked.id, None)
        .await
        .expect("the task");
    assert_eq!(seen.status.state, TaskState::InputRequired);
    assert_eq!(seen.history.len(), 2);

    let continued = task(f.send(&follow_up).await);
    assert_eq!(continued.status.state, TaskState::Completed);
    let (messages, _) = f.stored(&context).await;
    let users = messages
        .iter()
        .filter(|(_, role, _)| role == "user")
        .count();
    assert_eq!(users, 2, "the follow-up is stored once: {messages:?}");
    f.runtime.lifecycle().shutdown();
}

#[actix_web::test]
async fn a_cut_at_each_later_commit_of_a_turn_fails_its_task_or_refuses_the_request() {
    for cut in 2..=3 {
        let f = Fixture::new().await;
        let context = ContextId::generate();
        f.cut.cut_at(cut);
        let outcome = f.send(&user("steps", &context, None)).await;
        // The first output made the task visible (working); a later refused output
        // fails it, and that failure is recorded — nothing stays `working`.
        let failed = task(outcome);
        assert_eq!(failed.status.state, TaskState::Failed, "cut at {cut}");
        let (_, tasks) = f.stored(&context).await;
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].status.state, TaskState::Failed, "cut at {cut}");
        // The thread goes on.
        let done = task(f.send(&user("done", &context, None)).await);
        assert_eq!(done.status.state, TaskState::Completed);
        f.runtime.lifecycle().shutdown();
    }
}

#[actix_web::test]
async fn a_long_turn_has_its_message_committed_after_the_start_grace() {
    let f = Fixture::new().await;
    let context = ContextId::generate();
    let message = user("wait", &context, None);
    let running = f.send(&message);
    let watch = async {
        // The default grace is 20 ms; the message is durable soon after, while the turn
        // still waits.
        until_messages_stored(&f, std::slice::from_ref(&context)).await;
        let (messages, _) = f.stored(&context).await;
        assert_eq!(messages, vec![(1, "user".to_owned(), "wait".to_owned())]);
        assert_eq!(f.cut.commits(), 1);
        f.script.release.notify_one();
    };
    let (outcome, ()) = tokio::join!(running, watch);
    assert_eq!(task(outcome).status.state, TaskState::Completed);
    assert_eq!(f.cut.commits(), 2);
    f.runtime.lifecycle().shutdown();
}

/// Waits (bounded: 5 s) until the user message of each of `contexts` is committed.
async fn until_messages_stored(f: &Fixture, contexts: &[ContextId]) {
    for _ in 0..1000 {
        let mut stored = 0;
        for context in contexts {
            stored += usize::from(!f.stored(context).await.0.is_empty());
        }
        if stored == contexts.len() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("the message of a running turn was never committed");
}

#[actix_web::test]
async fn the_start_grace_holds_for_every_long_turn_among_quick_ones_and_after_a_quiet_spell() {
    let f = Fixture::new().await;
    // Quick turns: their first writes ride with their one commit.
    for _ in 0..5 {
        task(f.send(&user("done", &ContextId::generate(), None)).await);
    }
    assert_eq!(f.cut.commits(), 5);
    // Three long turns at once, each on its own thread: each message is committed on its
    // own after the grace, while the turns wait.
    let contexts: Vec<ContextId> = (0..3).map(|_| ContextId::generate()).collect();
    let messages: Vec<_> = contexts.iter().map(|c| user("wait", c, None)).collect();
    let running = futures_util::future::join_all(messages.iter().map(|m| f.send(m)));
    let watch = async {
        until_messages_stored(&f, &contexts).await;
        // Due together, the three may share a group commit.
        let commits = f.cut.commits();
        assert!((6..=8).contains(&commits), "{commits} commits");
        for _ in 0..3 {
            f.script.release.notify_one();
        }
    };
    let (outcomes, ()) = tokio::join!(running, watch);
    for outcome in outcomes {
        assert_eq!(task(outcome).status.state, TaskState::Completed);
    }
    // After a spell with no deadline pending, a long turn still gets its grace.
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    let context = ContextId::generate();
    let message = user("wait", &context, None);
    let running = f.send(&message);
    let watch = async {
        until_messages_stored(&f, std::slice::from_ref(&context)).await;
        f.script.release.notify_one();
    };
    let (outcome, ()) = tokio::join!(running, watch);
    assert_eq!(task(outcome).status.state, TaskState::Completed);
    f.runtime.lifecycle().shutdown();
}

#[actix_web::test]
async fn once_the_claims_are_loaded_a_new_key_reads_nothing_and_a_retry_reads_its_claim() {
    let f = Fixture::new().await;
    let context = ContextId::generate();
    let first = user("done", &context, None);
    // Before the load every send looks for an earlier claim of its key, and the store
    // checks the claim again.
    let done = task(f.send(&first).await);
    assert_eq!(f.cut.claim_reads(), 1);
    assert_eq!(f.cut.last_vouched(), Some(false));

    assert_eq!(f.runtime.load_claims().await.unwrap(), Some(1));
    for _ in 0..20 {
        task(f.send(&user("done", &ContextId::generate(), None)).await);
    }
    assert!(
        f.cut.claim_reads() <= 2,
        "new keys read the store {} times",
        f.cut.claim_reads() - 1
    );
    // The filter rules them out, so the store need not look either.
    assert_eq!(f.cut.last_vouched(), Some(true));
    let before = f.cut.claim_reads();
    let again = task(f.send(&first).await);
    assert_eq!(again.id, done.id, "the retry gets the first task");
    assert_eq!(f.cut.claim_reads(), before + 1, "a retry reads its claim");

    // A new process loads the claims the first one made.
    let f = f.restart(&Settings::default()).await;
    assert_eq!(f.runtime.load_claims().await.unwrap(), Some(21));
    let before = f.cut.claim_reads();
    let again = task(f.send(&first).await);
    assert_eq!(
        again.id, done.id,
        "a retry after a restart gets the first task"
    );
    assert_eq!(f.cut.claim_reads(), before + 1);
    let before = f.cut.claim_reads();
    task(f.send(&user("done", &ContextId::generate(), None)).await);
    assert!(f.cut.claim_reads() <= before + 1);
    f.runtime.lifecycle().shutdown();
}

#[actix_web::test]
async fn more_claims_than_the_filter_holds_read_the_store_and_retries_still_get_their_task() {
    let mut settings = Settings::default();
    settings.idempotency.filter_keys = 8;
    let f = Fixture::with(&settings, SqliteTestStore::open().await);
    assert_eq!(f.runtime.load_claims().await.unwrap(), Some(0));
    let first = user("done", &ContextId::generate(), None);
    let done = task(f.send(&first).await);
    for _ in 0..9 {
        task(f.send(&user("done", &ContextId::generate(), None)).await);
    }
    // The filter forgot the first claims: new keys read the store again.
    let before = f.cut.claim_reads();
    task(f.send(&user("done", &ContextId::generate(), None)).await);
    assert_eq!(
        f.cut.claim_reads(),
        before + 1,
        "a new key past the bound reads"
    );
    assert_eq!(
        f.cut.last_vouched(),
        Some(false),
        "and the store checks its claim"
    );
    let again = task(f.send(&first).await);
    assert_eq!(
        again.id, done.id,
        "a forgotten claim is still found in the store"
    );

    // Off, every send reads.
    settings.idempotency.filter_keys = 0;
    let f = f.restart(&settings).await;
    assert_eq!(f.runtime.load_claims().await.unwrap(), None);
    let before = f.cut.claim_reads();
    task(f.send(&user("done", &ContextId::generate(), None)).await);
    assert_eq!(f.cut.claim_reads(), before + 1);
    f.runtime.lifecycle().shutdown();
}

#[actix_web::test]
async fn a_read_of_every_owed_delivery_holds_commits_back_no_longer_than_a_write_waits_for_room() {
    let store = SqliteTestStore::open().await;
    let cut = CutStore::new(store.store.clone());
    cut.owed_reads_hang.store(true, Ordering::SeqCst);
    let mut settings = Settings::default();
    settings.persistence.enqueue_timeout_ms = 50;
    let runtime = Arc::new(
        Runtime::start(
            &settings,
            Arc::new(Handle(cut.clone())),
            ExecutorSource::Custom(Arc::new(Script::default())),
            &SkillRegistry::default(),
            None,
        )
        .expect("runtime starts"),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let policy = crate::outbound::UrlPolicy::new(&settings.push).expect("a policy");
    crate::push::start(&runtime, &settings.push, Arc::new(policy), stopped).expect("delivery");
    // The delivery reads every owed row while commits wait; the read never answers.
    cut.owed_read.notified().await;
    let context = ContextId::generate();
    let cmd = SendMessage {
        message: user("done", &context, None),
        config: SendConfig::default(),
        metadata: None,
        create_missing_task: false,
        idempotency_key: None,
    };
    // The send commits all the same once the read is given up (else it waits forever).
    let done = task(runtime.sends().send(&TenantId::default_tenant(), cmd).await);
    assert_eq!(done.status.state, TaskState::Completed);
    assert!(
        !runtime.outbox().hub().handing_over(),
        "the outbox is polled instead"
    );
    let _ = stop.send(true);
    runtime.lifecycle().shutdown();
}

/// A retry that joined a first send while it was in flight — here rejoining after that
/// send's turn was refused (its commit failed, its actor discarded: a lost lease, an
/// unreachable database) — finds its task without its message. It is not answered with
/// the task as it was (an acknowledgement of a message no table holds) but with a
/// retryable 503; the message sent again is then run and stored once.
#[actix_web::test]
async fn a_retry_of_a_send_whose_turn_was_refused_is_never_answered_without_its_message() {
    use super::super::send::{Accepted, Started};
    use super::super::thread::{Mode, Waiter};
    let f = Fixture::new().await;
    let context = ContextId::generate();
    let asked = task(f.send(&user("input", &context, None)).await);
    let reply = user("more", &context, Some(&asked.id));
    let cmd = SendMessage {
        message: reply.clone(),
        config: SendConfig::default(),
        metadata: None,
        create_missing_task: false,
        idempotency_key: None,
    };
    // The state such a retry finds: the first send in flight, its turn never stored.
    let first = Accepted::in_flight(&cmd, asked.id.clone());
    let rejoined = f
        .runtime
        .rejoin(
            &f.tenant,
            first,
            Mode::Blocking,
            super::super::routing::Origin::Client,
            cmd,
            &|tx| Waiter::Outcome {
                tx,
                history_length: None,
            },
        )
        .await
        .map(|started| match started {
            Started::Here(outcome) => outcome,
            Started::Elsewhere(..) => panic!("no cluster here"),
        });
    assert!(is_unavailable(&rejoined), "{rejoined:?}");
    // Sent again, it runs: its task holds it, once.
    let done = task(f.send(&reply).await);
    let held = done
        .history
        .iter()
        .filter(|m| m.message_id == reply.message_id)
        .count();
    assert_eq!(held, 1, "{done:?}");
}
