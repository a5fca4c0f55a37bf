//! The statements of the Postgres write path and what binds them: each statement's text
//! (one whatever the batch holds; a table's rows go through `unnest`, one array per
//! column) and, for each table, its rows as those column arrays in the statement's
//! parameter order. A column added to a table is one line of its `columns!` list (its
//! name, its array's type and where the row holds it), and one of its upsert clause if
//! an upsert changes it: the statements that take those lists number their placeholders
//! as they are assembled.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::LazyLock;

use tokio_postgres::types::ToSql;

use crate::store::packed::PgPacked;
use crate::store::tables::messages::NewMessage;
use crate::store::tables::push_configs::NewPushConfig;
use crate::store::tables::push_outbox::NewOutboxRow;
use crate::store::tables::task_events::NewTaskEvent;
use crate::store::tables::tasks::NewTask;
use crate::store::tables::threads::NewThread;
use crate::store::writes::{HistoryAppend, PushRow, Rows, appended_history};

/// Run first in every commit of a node in cluster mode: passes while the node's
/// token is still `$2`. The KEY SHARE lock keeps a takeover (which locks the row FOR
/// UPDATE) waiting until this commit is over.
pub const FENCE: &str = "SELECT a2a_require(EXISTS (SELECT 1 FROM cluster_nodes \
    WHERE node_id = $1 AND token = $2 FOR KEY SHARE), 'A2F01', 'fenced')";

/// A commit's rows of the five tables every turn writes — claims (of one window),
/// threads, messages, tasks (each with the history entries it appends), events — as
/// one statement: a thread's or task's first row (`NewThread::first`,
/// `NewTask::first`) a plain insert (no look for a conflicting row first, nor the
/// speculative insertion's second WAL record; a row of its key fails the statement
/// with `unique_violation`), the others upserts; each table's
/// insert a data-modifying `WITH` query (all run, whether read or not; none sees the
/// others' rows, and none needs to). Alone, it is a whole transaction in itself. It
/// fails with `A2D01` and the first key not claimed when a key is claimed within its
/// window, and with `A2F02` when a thread another node owns was left alone.
///
/// Its text is assembled once from the tables' column lists below (`columns!`), its
/// placeholders numbered in the order the writer binds the arrays: claims, the window,
/// threads, messages, tasks, events, first threads, first tasks.
pub fn write() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        let mut p = Placeholders::default();
        let (claimed, claims) = claimed(&mut p);
        let (threads, thread_arrays) = p.insert("threads", ThreadColumns::COLUMNS);
        let (messages, _) = p.insert("messages", MessageColumns::COLUMNS);
        let (tasks, _) = p.insert("tasks", TaskColumns::COLUMNS);
        let (events, _) = p.insert("task_events", EventColumns::COLUMNS);
        let (first_threads, _) = p.insert("threads", ThreadColumns::COLUMNS);
        let (first_tasks, _) = p.insert("tasks", TaskColumns::COLUMNS);
        format!(
            "WITH {claimed}, written AS ({threads} {THREAD_UPSERT} RETURNING 1), \
             m AS ({messages}), t AS ({tasks} {TASK_UPSERT}), e AS ({events}), \
             first_threads AS ({first_threads}), first_tasks AS ({first_tasks}) \
             SELECT CASE WHEN (SELECT count(*) FROM claimed) <> cardinality(${claims}::text[]) \
             THEN {first_unclaimed} \
             WHEN (SELECT count(*) FROM written) <> cardinality(${thread_arrays}::text[]) \
             THEN a2a_require(false, 'A2F02', 'a thread is owned by another node') END",
            first_unclaimed = first_unclaimed(claims),
        )
    });
    &TEXT
}

/// How a thread's row is upserted (in cluster mode, only by the node owning it).
const THREAD_UPSERT: &str = "ON CONFLICT (tenant_id, thread_id) DO UPDATE SET \
    updated_at = excluded.updated_at, expires_at = excluded.expires_at, \
    status = excluded.status, conversation_context = excluded.conversation_context, \
    owner_node = excluded.owner_node \
    WHERE excluded.owner_node IS NULL OR threads.owner_node IS NULL \
    OR threads.owner_node = excluded.owner_node";

/// How a task's row is upserted: its history gets the entries the row appends.
const TASK_UPSERT: &str = concat!(
    "ON CONFLICT (tenant_id, task_id) DO UPDATE SET context_id = excluded.context_id, \
    state = excluded.state, status_message = excluded.status_message, \
    status_entry = excluded.status_entry, \
    final_event_seq = coalesce(excluded.final_event_seq, tasks.final_event_seq), \
    status_timestamp = excluded.status_timestamp, artifacts = excluded.artifacts, \
    transitions = excluded.transitions, metadata = excluded.metadata, \
    updated_at = excluded.updated_at, history = ",
    appended_history!("tasks.history", "excluded.history")
);

/// The `claimed` query of [`write`] and [`claim`]: the claims' rows inserted, or taken
/// over when their key's claim is older than the window (the scalar after the arrays),
/// each key claimed returned. Also the number of the claims' first array.
fn claimed(p: &mut Placeholders) -> (String, usize) {
    let (insert, first) = p.insert("idempotency_keys", ClaimColumns::COLUMNS);
    let window = p.next();
    let text = format!(
        "claimed AS ({insert} ON CONFLICT (tenant_id, idem_key) DO UPDATE SET \
         context_id = excluded.context_id, task_id = excluded.task_id, \
         digest = excluded.digest, reply = excluded.reply, reply_seq = NULL, \
         created_at = excluded.created_at \
         WHERE idempotency_keys.created_at < excluded.created_at - ${window}::int8 \
         RETURNING tenant_id, idem_key)"
    );
    (text, first)
}

/// Fails a statement with `A2D01` and the first of the claims (arrays `$first`, tenants,
/// and `$first + 1`, keys) that `claimed` did not return.
fn first_unclaimed(first: usize) -> String {
    let keys = first + 1;
    format!(
        "a2a_require(false, 'A2D01', (SELECT a2a_id_text(u.k) \
         FROM unnest(${first}::text[], ${keys}::bytea[]) WITH ORDINALITY AS u(t, k, n) \
         WHERE NOT EXISTS (SELECT 1 FROM claimed c WHERE c.tenant_id = u.t \
         AND c.idem_key = u.k) ORDER BY u.n LIMIT 1))"
    )
}

/// The placeholders of a statement, numbered in the order its parameters are bound.
#[derive(Default)]
struct Placeholders(usize);

impl Placeholders {
    fn next(&mut self) -> usize {
        self.0 += 1;
        self.0
    }

    /// `INSERT INTO <table> (<columns>) SELECT * FROM unnest(<one array each>)`, and the
    /// number of its first array.
    fn insert(&mut self, table: &str, columns: Columns) -> (String, usize) {
        let first = self.0 + 1;
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        let arrays: Vec<String> = columns
            .iter()
            .map(|(_, ty)| format!("${}::{ty}[]", self.next()))
            .collect();
        let text = format!(
            "INSERT INTO {table} ({}) SELECT * FROM unnest({})",
            names.join(", "),
            arrays.join(", ")
        );
        (text, first)
    }
}

/// A table's columns as its `unnest` binds them: each column's name and the Postgres
/// type of its array's elements.
type Columns = &'static [(&'static str, &'static str)];

/// History entries appended to the rows of tasks a commit does not upsert (rare: a
/// turn links a message to its task together with the task's row).
pub const APPEND_HISTORY: &str = concat!(
    "UPDATE tasks SET history = ",
    appended_history!("tasks.history", "u.seqs"),
    " FROM unnest($1::text[], $2::bytea[], $3::text[]) AS u(tenant_id, task_id, seqs) \
    WHERE tasks.tenant_id = u.tenant_id AND tasks.task_id = u.task_id"
);

/// Claims of a window other than those of [`write`]'s (never, in practice: a process
/// has one window), as [`write`] claims them.
pub fn claim() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        let mut p = Placeholders::default();
        let (claimed, claims) = claimed(&mut p);
        format!(
            "WITH {claimed} SELECT CASE WHEN (SELECT count(*) FROM claimed) = \
             cardinality(${claims}::text[]) THEN NULL ELSE {} END",
            first_unclaimed(claims)
        )
    });
    &TEXT
}

pub const SETTLE: &str = "UPDATE idempotency_keys SET reply = $3, reply_seq = $4 \
    WHERE tenant_id = $1 AND idem_key = $2";

pub const FORGET: &str = "DELETE FROM idempotency_keys WHERE created_at < $1";

/// The conditions on `status` and `expires_at` are written so that no index serves
/// them (`|| ''`, `+ 0`): through `threads_by_expiry` Postgres read every thread due
/// (a bitmap of them, for each page's statement) rather than each id by the key.
pub const EXPIRE: &str = "UPDATE threads SET status = 'expired' WHERE tenant_id = $1 \
    AND thread_id = ANY($2::bytea[]) AND status || '' = 'active' AND expires_at + 0 <= $3";

/// [`WriteOp::RetireThreads`]: the tenant's threads among `$2` marked expired with an
/// expiry at or before `$3`, and everything in them (every sub-statement sees the
/// rows as they were before the statement, so each finds its rows through the
/// deleted threads and tasks).
/// Each table's rows are found by their key, with the ids as an array
/// (`= ANY(ARRAY(…))`) of bytes, as every table keeps them (`packed.rs`): ids that
/// compared otherwise than their keys (text in another collation, once) had Postgres
/// read every event and outbox row of the tenant for each statement. The thread's
/// conditions are written as in [`EXPIRE`].
pub const RETIRE: &str = "WITH gone AS (DELETE FROM threads WHERE tenant_id = $1 \
    AND thread_id = ANY($2::bytea[]) AND status || '' = 'expired' AND expires_at + 0 <= $3 \
    RETURNING thread_id), \
    tasks_gone AS (DELETE FROM tasks WHERE tenant_id = $1 \
    AND context_id = ANY(ARRAY(SELECT thread_id FROM gone)) \
    RETURNING task_id), \
    events_gone AS (DELETE FROM task_events WHERE tenant_id = $1 \
    AND task_id = ANY(ARRAY(SELECT task_id FROM tasks_gone))), \
    owed_gone AS (DELETE FROM push_outbox WHERE tenant_id = $1 \
    AND task_id = ANY(ARRAY(SELECT task_id FROM tasks_gone))), \
    configs_gone AS (DELETE FROM push_configs WHERE tenant_id = $1 \
    AND task_id = ANY(ARRAY(SELECT task_id FROM tasks_gone))), \
    messages_gone AS (DELETE FROM messages WHERE tenant_id = $1 \
    AND thread_id = ANY(ARRAY(SELECT thread_id FROM gone))) \
    SELECT thread_id FROM gone";

pub const NOTIFY: &str = "SELECT pg_notify($1, $2)";

pub const PUT_CONFIG: &str = "INSERT INTO push_configs (tenant_id, task_id, config_id, \
    dialect, url, token, auth_scheme, auth_credentials, created_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
    ON CONFLICT (tenant_id, task_id, config_id) DO UPDATE SET dialect = excluded.dialect, \
    url = excluded.url, token = excluded.token, auth_scheme = excluded.auth_scheme, \
    auth_credentials = excluded.auth_credentials, created_at = excluded.created_at";

pub const DELETE_CONFIG: &str =
    "DELETE FROM push_configs WHERE tenant_id = $1 AND task_id = $2 AND config_id = $3";

pub const DELETE_OWED: &str =
    "DELETE FROM push_outbox WHERE tenant_id = $1 AND task_id = $2 AND config_id = $3";

/// An owed delivery, the committing node's to make (`$9`: '' outside cluster mode).
pub const ENQUEUE: &str = "INSERT INTO push_outbox (tenant_id, task_id, config_id, seq, \
    payload, created_at, attempts, next_attempt_at, node_id) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// [`PUT_CONFIG`] for many configs at once (each key at most once).
pub const PUT_CONFIGS: &str = "INSERT INTO push_configs (tenant_id, task_id, config_id, \
    dialect, url, token, auth_scheme, auth_credentials, created_at) \
    SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[], $4::text[], $5::text[], \
    $6::text[], $7::text[], $8::text[], $9::bigint[]) \
    ON CONFLICT (tenant_id, task_id, config_id) DO UPDATE SET dialect = excluded.dialect, \
    url = excluded.url, token = excluded.token, auth_scheme = excluded.auth_scheme, \
    auth_credentials = excluded.auth_credentials, created_at = excluded.created_at";

/// [`ENQUEUE`] for many rows at once.
pub const ENQUEUES: &str = "INSERT INTO push_outbox (tenant_id, task_id, config_id, seq, \
    payload, created_at, attempts, next_attempt_at, node_id) \
    SELECT u.*, $9 FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bigint[], \
    $5::text[], $6::bigint[], $7::bigint[], $8::bigint[]) AS u";

/// A cluster node writes a delivery's outcome only while the row is still its own
/// (`$5`, `$7`): a node whose rows were taken over after its lease expired
/// (`store::cluster::adopt_owed`) changes nothing of them when it wakes up. A server
/// without cluster mode (`''`) owns every row.
pub const DONE: &str = "DELETE FROM push_outbox WHERE tenant_id = $1 AND task_id = $2 \
    AND config_id = $3 AND seq = $4 AND ($5 = '' OR node_id = $5)";

pub const RETRY: &str = "UPDATE push_outbox SET attempts = $5, next_attempt_at = $6 \
    WHERE tenant_id = $1 AND task_id = $2 AND config_id = $3 AND seq = $4 \
    AND ($7 = '' OR node_id = $7)";

/// A table's rows as one array per column, bound to its `unnest` statement in column
/// order: `$name` over rows of type `$row` (`of` takes any iteration of them, e.g. a
/// filtered one), each field `$field: Vec<$ty>` taken from a row `$r` by `$get`. With
/// `typed`, each field is named as its column and followed by its array's element type
/// (`$pg`), which `COLUMNS` lists for the statement's text ([`write`]).
macro_rules! columns {
    ($name:ident<$lt:lifetime>, $row:ident, typed { $($field:ident $pg:ident: $ty:ty = |$r:ident| $get:expr),+ $(,)? }) => {
        columns!($name<$lt>, $row, { $($field: $ty = |$r| $get),+ });

        impl $name<'_> {
            /// The columns, each named as the table names it, with its array's type.
            pub(super) const COLUMNS: Columns = &[$((stringify!($field), stringify!($pg))),+];
        }
    };
    ($name:ident<$lt:lifetime>, $row:ident, { $($field:ident: $ty:ty = |$r:ident| $get:expr),+ $(,)? }) => {
        pub(super) struct $name<$lt> {
            $(pub(super) $field: Vec<$ty>,)+
        }

        impl<$lt> $name<$lt> {
            pub(super) fn of<'r: $lt>(rows: impl IntoIterator<Item = &$lt $row<'r>> + Clone) -> Self {
                Self {
                    $($field: rows.clone().into_iter().map(|$r| $get).collect(),)+
                }
            }

            pub(super) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
                vec![$(&self.$field),+]
            }
        }
    };
}

/// The configs among a commit's push rows, each key once as its last write leaves it
/// (one `INSERT … ON CONFLICT` may not touch a row twice), in first-write order.
pub(super) fn last_configs<'a>(rows: &'a [PushRow<'_>]) -> Vec<&'a NewPushConfig<'a>> {
    let mut last: Vec<&NewPushConfig> = Vec::new();
    let mut at: HashMap<(&str, &str, &str), usize> = HashMap::new();
    for row in rows {
        if let PushRow::PutConfig(c) = row {
            match at.entry((c.tenant_id, c.task_id, c.config_id)) {
                Entry::Occupied(i) => last[*i.get()] = c,
                Entry::Vacant(v) => {
                    v.insert(last.len());
                    last.push(c);
                }
            }
        }
    }
    last
}

/// The outbox rows among a commit's push rows.
pub(super) fn owed_rows<'a, 'r>(
    rows: &'a [PushRow<'r>],
) -> impl Iterator<Item = &'a NewOutboxRow<'r>> + Clone {
    rows.iter().filter_map(|row| match row {
        PushRow::Enqueue(r) => Some(r),
        _ => None,
    })
}

/// The claims of a commit as column arrays, one set per window (in practice one: a
/// process has one `idempotency.window_secs`): the window is the statement's scalar.
#[derive(Default)]
pub(super) struct ClaimColumns<'a> {
    tenant: Vec<&'a str>,
    key: Vec<PgPacked<'a>>,
    context: Vec<PgPacked<'a>>,
    task: Vec<PgPacked<'a>>,
    digest: Vec<PgPacked<'a>>,
    reply: Vec<Option<&'a str>>,
    created: Vec<i64>,
}

impl<'a> ClaimColumns<'a> {
    /// The columns, in the order [`Self::params`] binds them, with their arrays' types.
    const COLUMNS: Columns = &[
        ("tenant_id", "text"),
        ("idem_key", "bytea"),
        ("context_id", "bytea"),
        ("task_id", "bytea"),
        ("digest", "bytea"),
        ("reply", "text"),
        ("created_at", "int8"),
    ];

    pub(super) fn of(rows: &'a Rows<'_>) -> Vec<(i64, Self)> {
        let mut sets: Vec<(i64, Self)> = Vec::new();
        for (row, taken_over_before, _) in &rows.claims {
            let window = row.created_at.saturating_sub(*taken_over_before);
            let i = match sets.iter().position(|(w, _)| *w == window) {
                Some(i) => i,
                None => {
                    sets.push((window, Self::default()));
                    sets.len() - 1
                }
            };
            let set = &mut sets[i].1;
            set.tenant.push(row.tenant_id);
            set.key.push(PgPacked(row.idem_key));
            set.context.push(PgPacked(row.context_id));
            set.task.push(PgPacked(row.task_id));
            set.digest.push(PgPacked(row.digest));
            set.reply.push(row.reply.as_deref());
            set.created.push(row.created_at);
        }
        sets
    }

    pub(super) fn params<'s>(&'s self, window: &'s i64) -> Vec<&'s (dyn ToSql + Sync)> {
        vec![
            &self.tenant,
            &self.key,
            &self.context,
            &self.task,
            &self.digest,
            &self.reply,
            &self.created,
            window,
        ]
    }
}

columns!(ConfigColumns<'a>, NewPushConfig, {
    tenant: &'a str = |r| r.tenant_id,
    task: PgPacked<'a> = |r| PgPacked(r.task_id),
    config: &'a str = |r| r.config_id,
    dialect: &'static str = |r| r.dialect,
    url: &'a str = |r| r.url,
    token: Option<&'a str> = |r| r.token,
    auth_scheme: Option<&'a str> = |r| r.auth_scheme,
    auth_credentials: Option<&'a str> = |r| r.auth_credentials,
    created: i64 = |r| r.created_at,
});

// The owner is the statement's scalar, after these.
columns!(OwedColumns<'a>, NewOutboxRow, {
    tenant: &'a str = |r| r.tenant_id,
    task: PgPacked<'a> = |r| PgPacked(r.task_id),
    config: &'a str = |r| r.config_id,
    seq: i64 = |r| r.seq,
    payload: &'a str = |r| r.payload.as_str(),
    created: i64 = |r| r.created_at,
    attempts: i64 = |r| r.attempts,
    next_attempt: i64 = |r| r.next_attempt_at,
});

columns!(ThreadColumns<'a>, NewThread, typed {
    tenant_id text: &'a str = |r| r.tenant_id,
    thread_id bytea: PgPacked<'a> = |r| PgPacked(r.thread_id),
    created_at int8: i64 = |r| r.created_at,
    updated_at int8: i64 = |r| r.updated_at,
    expires_at int8: i64 = |r| r.expires_at,
    status text: &'a str = |r| r.status,
    conversation_context text: &'a str = |r| r.conversation_context.as_str(),
    owner_node text: Option<&'a str> = |r| r.owner_node,
});

columns!(MessageColumns<'a>, NewMessage, typed {
    tenant_id text: &'a str = |r| r.tenant_id,
    thread_id bytea: PgPacked<'a> = |r| PgPacked(r.thread_id),
    seq int8: i64 = |r| r.seq,
    message_id bytea: Option<PgPacked<'a>> = |r| r.message_id.map(PgPacked),
    task_id bytea: Option<PgPacked<'a>> = |r| r.task_id.map(PgPacked),
    role text: &'a str = |r| r.role,
    author text: Option<&'a str> = |r| r.author,
    content text: &'a str = |r| r.content,
    parts text: &'a str = |r| r.parts.as_str(),
    tool_calls text: &'a str = |r| r.tool_calls.as_str(),
    metadata text: Option<&'a str> = |r| r.metadata.as_deref(),
    created_at int8: i64 = |r| r.created_at,
    extensions text: Option<&'a str> = |r| r.extensions.as_deref(),
    reference_task_ids text: Option<&'a str> = |r| r.reference_task_ids.as_deref(),
});

columns!(TaskColumns<'a>, NewTask, typed {
    tenant_id text: &'a str = |r| r.tenant_id,
    task_id bytea: PgPacked<'a> = |r| PgPacked(r.task_id),
    context_id bytea: PgPacked<'a> = |r| PgPacked(r.context_id),
    state text: &'a str = |r| r.state,
    status_message text: Option<&'a str> = |r| r.status_message.as_deref(),
    status_timestamp int8: i64 = |r| r.status_timestamp,
    artifacts text: &'a str = |r| r.artifacts.as_str(),
    transitions text: &'a str = |r| r.transitions.as_str(),
    metadata text: Option<&'a str> = |r| r.metadata.as_deref(),
    created_at int8: i64 = |r| r.created_at,
    updated_at int8: i64 = |r| r.updated_at,
    history text: &'a str = |r| r.history.as_str(),
    status_entry int8: Option<i64> = |r| r.status_entry,
    final_event_seq int8: Option<i64> = |r| r.final_event_seq,
});

columns!(AppendColumns<'a>, HistoryAppend, {
    tenant: &'a str = |r| r.tenant_id,
    task: PgPacked<'a> = |r| PgPacked(r.task_id),
    seqs: &'a str = |r| r.seqs.as_str(),
});

columns!(EventColumns<'a>, NewTaskEvent, typed {
    tenant_id text: &'a str = |r| r.tenant_id,
    task_id bytea: PgPacked<'a> = |r| PgPacked(r.task_id),
    seq int8: i64 = |r| r.seq,
    kind text: &'a str = |r| r.kind,
    payload text: &'a str = |r| r.payload.as_str(),
    created_at int8: i64 = |r| r.created_at,
    message_seq int8: Option<i64> = |r| r.message_seq,
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The placeholders of a statement: each number, in the order of first appearance.
    fn placeholders(text: &str) -> Vec<usize> {
        let mut seen = Vec::new();
        for part in text.split('$').skip(1) {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            let n: usize = digits.parse().unwrap();
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
        seen
    }

    /// `write`'s placeholders are numbered 1, 2, … in the order the writer binds its
    /// arrays, one per column of each table's rows, and the claims' window after theirs.
    #[test]
    fn the_write_binds_each_table_s_columns_in_order() {
        let arrays = ClaimColumns::COLUMNS.len()
            + 1
            + 2 * ThreadColumns::COLUMNS.len()
            + MessageColumns::COLUMNS.len()
            + 2 * TaskColumns::COLUMNS.len()
            + EventColumns::COLUMNS.len();
        assert_eq!(placeholders(write()), (1..=arrays).collect::<Vec<_>>());
        let claims = ClaimColumns::COLUMNS.len() + 1;
        assert_eq!(placeholders(claim()), (1..=claims).collect::<Vec<_>>());
        // Each table's insert names its columns in the order of its arrays.
        let tasks: Vec<&str> = TaskColumns::COLUMNS.iter().map(|(c, _)| *c).collect();
        assert!(write().contains(&format!("INSERT INTO tasks ({})", tasks.join(", "))));
    }
}
