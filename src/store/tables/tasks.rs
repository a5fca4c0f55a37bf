//! The `tasks` table: a task's row, written and read, and how its history and
//! transitions are kept in it.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable};

use super::{decode, decode_opt, encode, id};
use crate::domain::{
    ContextId, ListTasksQuery, Message, Metadata, Task, TaskId, TaskState, TaskStatus, TenantId,
    Timestamp, Transition,
};
use crate::store::page_token::Cursor;
use crate::store::schema::tasks;
use crate::store::statement::{Dialect, Statement};
use crate::store::{StoreError, TaskRecord};

/// The columns a [`TaskRow`] is read from.
const COLUMNS: &str = "tenant_id, task_id, context_id, state, status_message, \
    status_timestamp, artifacts, transitions, metadata, created_at, updated_at, history, \
    status_entry, final_event_seq";

/// The condition of a task row in a state it can still leave (not one of
/// [`TaskState::TERMINAL`]), as Postgres' partial index `tasks_open` has it in its
/// `WHERE`.
const NOT_TERMINAL: &str = " NOT IN ('completed', 'canceled', 'failed', 'rejected')";

/// The same condition as SQLite's `tasks_open` has it: one comparison per state, each
/// written after the column. SQLite evaluates a partial index's `WHERE` on every write of
/// a row and codes `NOT IN` a list of more than two constants as a temporary b-tree built
/// for each run of the statement (migration `…_open_tasks_term_by_term`).
const NOT_TERMINAL_TERMS: [&str; 4] = [
    " <> 'completed'",
    " <> 'canceled'",
    " <> 'failed'",
    " <> 'rejected'",
];

/// `columns` of the tenant's task `task_id`.
fn of_task(d: Dialect, columns: &str, tenant: &str, task_id: &str) -> Statement {
    let mut st = Statement::new(d, "SELECT ");
    st.push(columns)
        .push(" FROM tasks WHERE tenant_id = ")
        .text(tenant);
    st.push(" AND task_id = ").packed(task_id);
    st
}

/// The thread's tasks in a state they can still leave, oldest first: [`TaskRow`]s.
///
/// The states are written into the SQL: a planner uses a partial index only for a
/// condition it can prove implies the index's `WHERE`, which a bound parameter never does
/// (Postgres' generic plans, SQLite's plans). Written out, the condition is the index's
/// own, and a thread's reload reads its open tasks from `tasks_open` — a few entries —
/// rather than every task the thread ever had from `tasks_by_context`.
pub(in crate::store) fn open_of_thread(d: Dialect, tenant: &str, thread_id: &str) -> Statement {
    let mut st = Statement::new(d, "SELECT ");
    st.push(COLUMNS)
        .push(" FROM tasks WHERE tenant_id = ")
        .text(tenant);
    st.push(" AND context_id = ")
        .packed(thread_id)
        .push(" AND ");
    match d {
        Dialect::Postgres => {
            st.push("state").push(NOT_TERMINAL);
        }
        Dialect::Sqlite => {
            st.push("(");
            for (i, term) in NOT_TERMINAL_TERMS.iter().enumerate() {
                if i > 0 {
                    st.push(" AND ");
                }
                st.push("state").push(term);
            }
            st.push(")");
        }
    }
    st.push(" ORDER BY created_at, task_id");
    st
}

/// The thread a task is of: a [`ContextRow`], or none.
pub(in crate::store) fn context(d: Dialect, tenant: &str, task_id: &str) -> Statement {
    let mut st = of_task(d, "context_id", tenant, task_id);
    st.push(" LIMIT 1");
    st
}

/// The task's row and the `seq` of the last event of its log, in one statement so both
/// are of one snapshot: a [`TaskWithLastSeq`], or none.
pub(in crate::store) fn with_last_seq(d: Dialect, tenant: &str, task_id: &str) -> Statement {
    let mut st = Statement::new(d, "SELECT ");
    st.push(COLUMNS).push(
        ", (SELECT max(e.seq) FROM task_events e WHERE e.tenant_id = t.tenant_id \
         AND e.task_id = t.task_id) AS last_seq FROM tasks t WHERE t.tenant_id = ",
    );
    st.text(tenant).push(" AND t.task_id = ").packed(task_id);
    st.push(" LIMIT 1");
    st
}

/// The task's row if it is its final status update, one after `after_seq`
/// ([`TaskRow::final_event_seq`]): a [`TaskRow`], or none.
pub(in crate::store) fn final_after(
    d: Dialect,
    tenant: &str,
    task_id: &str,
    after_seq: i64,
) -> Statement {
    let mut st = of_task(d, COLUMNS, tenant, task_id);
    st.push(" AND final_event_seq > ")
        .int(after_seq)
        .push(" LIMIT 1");
    st
}

/// `AND`s the filters of a `ListTasks` query (not its cursor).
fn matching(st: &mut Statement, tenant: &str, query: &ListTasksQuery) {
    st.push(" FROM tasks WHERE tenant_id = ").text(tenant);
    if let Some(context_id) = &query.context_id {
        st.push(" AND context_id = ").packed(context_id.as_str());
    }
    if let Some(state) = query.status {
        st.push(" AND state = ").text(state.as_str());
    }
    if let Some(after) = query.status_timestamp_after {
        st.push(" AND status_timestamp >= ").int(after.millis());
    }
}

/// How many of the tenant's tasks match the query's filters: a [`Count`](super::Count).
pub(in crate::store) fn count(d: Dialect, tenant: &str, query: &ListTasksQuery) -> Statement {
    let mut st = Statement::new(d, "SELECT count(*) AS n");
    matching(&mut st, tenant, query);
    st
}

/// A page of the tenant's tasks matching the query, after `cursor`, latest status
/// first, `rows` of them: [`TaskRow`]s.
pub(in crate::store) fn page(
    d: Dialect,
    tenant: &str,
    query: &ListTasksQuery,
    cursor: Option<&Cursor>,
    rows: usize,
) -> Statement {
    let mut st = Statement::new(d, "SELECT ");
    st.push(COLUMNS);
    matching(&mut st, tenant, query);
    if let Some(c) = cursor {
        st.push(" AND (status_timestamp < ").int(c.status_timestamp);
        st.push(" OR (status_timestamp = ").int(c.status_timestamp);
        st.push(" AND task_id < ").packed(&c.task_id).push("))");
    }
    st.push(" ORDER BY status_timestamp DESC, task_id DESC")
        .limit(rows);
    st
}

/// The thread of a task, as [`context`] reads it.
#[derive(QueryableByName)]
#[diesel(table_name = tasks)]
pub(in crate::store) struct ContextRow {
    context_id: String,
}

impl ContextRow {
    pub(in crate::store) fn into_context(self) -> Result<ContextId, StoreError> {
        id("task context id", self.context_id, ContextId::parse)
    }
}

/// A task's row with the `seq` of its log's last event ([`with_last_seq`]).
#[derive(QueryableByName)]
pub(in crate::store) struct TaskWithLastSeq {
    #[diesel(embed)]
    pub(in crate::store) task: TaskRow,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(in crate::store) last_seq: Option<i64>,
}

pub(in crate::store) struct NewTask<'a> {
    pub(in crate::store) tenant_id: &'a str,
    pub(in crate::store) task_id: &'a str,
    pub(in crate::store) context_id: &'a str,
    pub(in crate::store) state: &'static str,
    pub(in crate::store) status_message: Option<String>,
    pub(in crate::store) status_timestamp: i64,
    pub(in crate::store) artifacts: String,
    pub(in crate::store) transitions: String,
    pub(in crate::store) metadata: Option<String>,
    pub(in crate::store) created_at: i64,
    pub(in crate::store) updated_at: i64,
    /// The history entries this write appends (`seq`s, comma-separated; `''` for none):
    /// an upsert adds them to the stored list ([`crate::store::writes`]).
    pub(in crate::store) history: String,
    pub(in crate::store) status_entry: Option<i64>,
    /// Set when the batch's final status update of the task is this row
    /// (`schema::tasks::final_event_seq`, [`crate::store::writes`]).
    pub(in crate::store) final_event_seq: Option<i64>,
    /// The task's first row ([`crate::store::WriteOp::InsertTask`]): inserted, not upserted.
    pub(in crate::store) first: bool,
}

impl<'a> NewTask<'a> {
    pub(in crate::store) fn new(r: &'a TaskRecord) -> Result<Self, StoreError> {
        let t = &r.task;
        Ok(Self {
            tenant_id: t.tenant.as_str(),
            task_id: t.id.as_str(),
            context_id: t.context_id.as_str(),
            state: t.status.state.as_str(),
            status_message: t
                .status
                .message
                .as_ref()
                .map(|m| encode("status message", m))
                .transpose()?,
            status_timestamp: t.status.timestamp.millis(),
            artifacts: encode("artifacts", &t.artifacts)?,
            transitions: encode("transitions", stored_transitions(t))?,
            metadata: t
                .metadata
                .as_ref()
                .map(|m| encode("task metadata", m))
                .transpose()?,
            created_at: t.created_at.millis(),
            updated_at: t.updated_at.millis(),
            history: String::new(),
            status_entry: r.status_entry,
            final_event_seq: None,
            first: false,
        })
    }
}

/// The transitions a task's row stores: all but those its other columns say — the first,
/// `submitted` at the task's creation, and the last, into the current state at the
/// status's time (an echo task stores none). [`read_transitions`] adds them back: a list
/// that does not start in `submitted` lacks the first (no task enters `submitted` later),
/// and one that does not end in the current state the last (a task's transitions change
/// state each; a status that keeps the state is not one). Rows written before kept them
/// all, and read the same.
pub(in crate::store) fn stored_transitions(t: &Task) -> &[Transition] {
    let mut list = &t.transitions[..];
    if let [rest @ .., last] = list
        && last.state == t.status.state
        && last.timestamp == t.status.timestamp
        && rest.last().is_none_or(|before| before.state != last.state)
    {
        list = rest;
    }
    if let [first, rest @ ..] = list
        && first.state == TaskState::Submitted
        && first.timestamp == t.created_at
    {
        list = rest;
    }
    list
}

/// A task's transitions from what its row stores ([`stored_transitions`]).
pub(in crate::store) fn read_transitions(
    mut stored: Vec<Transition>,
    state: TaskState,
    created_at: Timestamp,
    status_at: Timestamp,
) -> Vec<Transition> {
    if stored
        .first()
        .is_none_or(|first| first.state != TaskState::Submitted)
    {
        stored.insert(
            0,
            Transition {
                state: TaskState::Submitted,
                timestamp: created_at,
            },
        );
    }
    if stored.last().is_none_or(|last| last.state != state) {
        stored.push(Transition {
            state,
            timestamp: status_at,
        });
    }
    stored
}

/// Adds `seq` to a comma-separated history list.
pub(in crate::store) fn append_seq(list: &mut String, seq: i64) {
    use std::fmt::Write;
    if !list.is_empty() {
        list.push(',');
    }
    // Writing into a String cannot fail.
    let _ = write!(list, "{seq}");
}

/// The `seq`s of a stored history list, oldest first.
pub(in crate::store) fn history_seqs(raw: &str) -> Result<Vec<i64>, StoreError> {
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    raw.split(',')
        .map(|n| {
            n.parse::<i64>()
                .map_err(|_| StoreError::Corrupt(format!("task history {raw:?}")))
        })
        .collect()
}

#[derive(QueryableByName)]
#[diesel(table_name = tasks)]
pub(in crate::store) struct TaskRow {
    tenant_id: String,
    pub(in crate::store) task_id: String,
    context_id: String,
    state: String,
    status_message: Option<String>,
    pub(in crate::store) status_timestamp: i64,
    artifacts: String,
    transitions: String,
    metadata: Option<String>,
    created_at: i64,
    updated_at: i64,
    history: String,
    status_entry: Option<i64>,
    final_event_seq: Option<i64>,
}

impl TaskRow {
    /// The `seq` of the task's final status update if the row is that event (it is then
    /// not in the log): see `schema::tasks::final_event_seq`.
    pub(in crate::store) fn final_event_seq(&self) -> Option<i64> {
        self.final_event_seq
    }

    /// The sequence number of the task's last event, given the last one in its log.
    pub(in crate::store) fn last_event_seq(&self, logged: Option<i64>) -> i64 {
        logged.max(self.final_event_seq).unwrap_or(0)
    }

    /// The thread the task's history refers to.
    pub(in crate::store) fn context_id(&self) -> &str {
        &self.context_id
    }

    /// The `seq`s of the task's history in its thread, oldest first.
    pub(in crate::store) fn history_seqs(&self) -> Result<Vec<i64>, StoreError> {
        history_seqs(&self.history)
    }

    /// Which entry of the history list is the status message, if one is.
    pub(in crate::store) fn status_entry(&self) -> Option<usize> {
        self.status_entry.and_then(|e| usize::try_from(e).ok())
    }

    /// The task with the given history and, when the row names it by its history entry
    /// ([`Self::status_entry`]), status message; with `include_artifacts` false the
    /// artifacts column is not even decoded.
    pub(in crate::store) fn into_task(
        self,
        history: Vec<Message>,
        status_entry: Option<Message>,
        include_artifacts: bool,
    ) -> Result<Task, StoreError> {
        let state = TaskState::from_str_opt(&self.state)
            .ok_or_else(|| StoreError::Corrupt(format!("task state {:?}", self.state)))?;
        Ok(Task {
            id: id("task id", self.task_id, TaskId::parse)?,
            context_id: id("task context id", self.context_id, ContextId::parse)?,
            tenant: id("task tenant", self.tenant_id, TenantId::from_store)?,
            status: TaskStatus {
                state,
                message: match status_entry {
                    Some(message) => Some(message),
                    None => decode_opt("status message", self.status_message.as_deref())?,
                },
                timestamp: Timestamp(self.status_timestamp),
            },
            artifacts: if include_artifacts {
                decode("artifacts", &self.artifacts)?
            } else {
                Vec::new()
            },
            history,
            metadata: decode_opt::<Metadata>("task metadata", self.metadata.as_deref())?,
            transitions: read_transitions(
                decode("transitions", &self.transitions)?,
                state,
                Timestamp(self.created_at),
                Timestamp(self.status_timestamp),
            ),
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            // The caller knows the event log; until it says, the first generation.
            generation: 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Part;

    #[test]
    fn not_terminal_names_the_terminal_states() {
        let states: Vec<String> = TaskState::TERMINAL
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        assert_eq!(NOT_TERMINAL, format!(" NOT IN ({})", states.join(", ")));
        let terms: Vec<String> = states.iter().map(|s| format!(" <> {s}")).collect();
        assert_eq!(NOT_TERMINAL_TERMS.to_vec(), terms);
    }

    fn task_going_through(steps: &[(TaskState, i64)]) -> Task {
        let first = Message::agent(ContextId::parse("c").unwrap(), None, vec![Part::text("hi")]);
        let mut task = Task::submitted(
            TaskId::parse("t").unwrap(),
            ContextId::parse("c").unwrap(),
            TenantId::parse("acme").unwrap(),
            first,
            Timestamp(10),
        );
        for &(state, at) in steps {
            task.set_status(TaskStatus {
                state,
                message: None,
                timestamp: Timestamp(at),
            });
        }
        task
    }

    /// Every way through the states a task's row stores fewer transitions for reads back
    /// the same; an echo task stores none.
    #[test]
    fn transitions_the_row_says_otherwise_are_not_stored_and_read_back_the_same() {
        use TaskState::*;
        let cases: &[(&[(TaskState, i64)], usize)] = &[
            (&[], 0),
            (&[(Completed, 10)], 0),
            (&[(Completed, 20)], 0),
            (&[(Working, 10), (Completed, 20)], 1),
            (&[(Working, 15), (Working, 20)], 1),
            (&[(Working, 15), (InputRequired, 20), (Working, 30)], 2),
            (
                &[
                    (Working, 15),
                    (InputRequired, 20),
                    (Working, 30),
                    (Failed, 40),
                ],
                3,
            ),
            (&[(Submitted, 12)], 0),
            (&[(Rejected, 10)], 0),
        ];
        for (steps, stored) in cases {
            let task = task_going_through(steps);
            let kept = stored_transitions(&task);
            assert_eq!(kept.len(), *stored, "{steps:?}");
            let read = read_transitions(
                kept.to_vec(),
                task.status.state,
                task.created_at,
                task.status.timestamp,
            );
            assert_eq!(read, task.transitions, "{steps:?}");
        }
        // A task made at another time than its first transition keeps that one.
        let mut task = task_going_through(&[(Completed, 20)]);
        task.created_at = Timestamp(5);
        let kept = stored_transitions(&task);
        assert_eq!(kept.len(), 1);
        let read = read_transitions(kept.to_vec(), Completed, Timestamp(5), Timestamp(20));
        assert_eq!(read, task.transitions);
        // Rows written before stored every transition: read as they are.
        let task = task_going_through(&[(Working, 15), (Completed, 20)]);
        let read = read_transitions(
            task.transitions.clone(),
            Completed,
            task.created_at,
            Timestamp(20),
        );
        assert_eq!(read, task.transitions);
    }
}
