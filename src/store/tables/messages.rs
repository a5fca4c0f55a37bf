//! The `messages` table: a thread's history, one row per message, written and read.

use diesel::QueryableByName;

use super::{decode, decode_opt, encode, id};
use crate::domain::{ContextId, Message, MessageId, Part, Role, TaskId, TenantId, Timestamp};
use crate::store::schema::messages;
use crate::store::statement::{Dialect, List, Statement};
use crate::store::{MessageRecord, StoreError};

/// The columns a [`MessageRow`] is read from.
const COLUMNS: &str = "tenant_id, thread_id, seq, message_id, task_id, role, author, content, \
    parts, tool_calls, metadata, created_at, extensions, reference_task_ids";

fn of_thread(d: Dialect, tenant: &str, thread_id: &str) -> Statement {
    let mut st = Statement::new(d, "SELECT ");
    st.push(COLUMNS)
        .push(" FROM messages WHERE tenant_id = ")
        .text(tenant);
    st.push(" AND thread_id = ").packed(thread_id);
    st
}

/// The thread's newest `window` messages, newest first: [`MessageRow`]s.
pub(in crate::store) fn newest(
    d: Dialect,
    tenant: &str,
    thread_id: &str,
    window: usize,
) -> Statement {
    let mut st = of_thread(d, tenant, thread_id);
    st.push(" ORDER BY seq DESC").limit(window);
    st
}

/// The thread's message `seq`: a [`MessageRow`], or none.
pub(in crate::store) fn at(d: Dialect, tenant: &str, thread_id: &str, seq: i64) -> Statement {
    let mut st = of_thread(d, tenant, thread_id);
    st.push(" AND seq = ").int(seq).push(" LIMIT 1");
    st
}

/// The messages `seqs` of any of `threads` (not empty, either): [`MessageRow`]s.
pub(in crate::store) fn of_threads(
    d: Dialect,
    tenant: &str,
    threads: &[&str],
    seqs: &[i64],
) -> Statement {
    let mut st = Statement::new(d, "SELECT ");
    st.push(COLUMNS)
        .push(" FROM messages WHERE tenant_id = ")
        .text(tenant);
    st.push(" AND ")
        .any("thread_id", List::ids(threads.iter().copied()));
    st.push(" AND ").any("seq", List::BigInt(seqs.to_vec()));
    st
}

/// The `seq` of the thread's newest message: a [`MaxSeq`] (none when it has none).
pub(in crate::store) fn last_seq(d: Dialect, tenant: &str, thread_id: &str) -> Statement {
    let mut st = Statement::new(d, "SELECT max(seq) AS seq FROM messages WHERE tenant_id = ");
    st.text(tenant).push(" AND thread_id = ").packed(thread_id);
    st
}

/// The largest `seq` of a set of rows (none of an empty set).
#[derive(QueryableByName)]
pub(in crate::store) struct MaxSeq {
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    pub(in crate::store) seq: Option<i64>,
}

pub(in crate::store) struct NewMessage<'a> {
    pub(in crate::store) tenant_id: &'a str,
    pub(in crate::store) thread_id: &'a str,
    pub(in crate::store) seq: i64,
    pub(in crate::store) message_id: Option<&'a str>,
    pub(in crate::store) task_id: Option<&'a str>,
    pub(in crate::store) role: &'a str,
    pub(in crate::store) author: Option<&'a str>,
    /// `''` when the content is the text of the parts ([`stored_content`]).
    pub(in crate::store) content: &'a str,
    pub(in crate::store) parts: String,
    pub(in crate::store) tool_calls: String,
    pub(in crate::store) metadata: Option<String>,
    pub(in crate::store) created_at: i64,
    pub(in crate::store) extensions: Option<String>,
    pub(in crate::store) reference_task_ids: Option<String>,
}

impl<'a> NewMessage<'a> {
    pub(in crate::store) fn new(r: &'a MessageRecord) -> Result<Self, StoreError> {
        Ok(Self {
            tenant_id: r.tenant.as_str(),
            thread_id: r.thread_id.as_str(),
            seq: r.seq,
            message_id: r.message_id.as_ref().map(MessageId::as_str),
            task_id: r.task_id.as_ref().map(TaskId::as_str),
            role: &r.role,
            author: r.author.as_deref(),
            content: stored_content(&r.content, &r.parts),
            parts: encode("message parts", &r.parts)?,
            tool_calls: encode("tool calls", &r.tool_calls)?,
            metadata: r
                .metadata
                .as_ref()
                .map(|m| encode("message metadata", m))
                .transpose()?,
            created_at: r.created_at.millis(),
            extensions: non_empty(&r.extensions)
                .map(|e| encode("message extensions", e))
                .transpose()?,
            reference_task_ids: non_empty(&r.reference_task_ids)
                .map(|ids| encode("referenced tasks", ids))
                .transpose()?,
        })
    }
}

fn non_empty<T>(list: &[T]) -> Option<&[T]> {
    (!list.is_empty()).then_some(list)
}

/// What the `content` column keeps of a message's text: nothing when it is the text of
/// its parts ([`Part::text_of`]), so an A2A message's text is stored once, in `parts`.
pub(in crate::store) fn stored_content<'a>(content: &'a str, parts: &[Part]) -> &'a str {
    if is_text_of(content, parts) {
        ""
    } else {
        content
    }
}

/// `content == Part::text_of(parts)`, without rendering the parts' text; false for an
/// empty `content` (nothing to save).
fn is_text_of(content: &str, parts: &[Part]) -> bool {
    let mut rest = content;
    let mut texts = parts.iter().filter_map(Part::as_text);
    let Some(first) = texts.next() else {
        return false;
    };
    let Some(after) = rest.strip_prefix(first) else {
        return false;
    };
    rest = after;
    for text in texts {
        match rest.strip_prefix('\n').and_then(|r| r.strip_prefix(text)) {
            Some(after) => rest = after,
            None => return false,
        }
    }
    rest.is_empty() && !content.is_empty()
}

#[derive(Clone, QueryableByName)]
#[diesel(table_name = messages)]
pub(in crate::store) struct MessageRow {
    pub(in crate::store) tenant_id: String,
    pub(in crate::store) thread_id: String,
    pub(in crate::store) seq: i64,
    pub(in crate::store) message_id: Option<String>,
    pub(in crate::store) task_id: Option<String>,
    pub(in crate::store) role: String,
    pub(in crate::store) author: Option<String>,
    pub(in crate::store) content: String,
    pub(in crate::store) parts: String,
    pub(in crate::store) tool_calls: String,
    pub(in crate::store) metadata: Option<String>,
    pub(in crate::store) created_at: i64,
    pub(in crate::store) extensions: Option<String>,
    pub(in crate::store) reference_task_ids: Option<String>,
}

impl MessageRow {
    pub(in crate::store) fn into_record(self) -> Result<MessageRecord, StoreError> {
        let parts: Vec<Part> = decode("message parts", &self.parts)?;
        let (extensions, reference_task_ids) = (self.extensions()?, self.reference_task_ids()?);
        Ok(MessageRecord {
            tenant: id("message tenant", self.tenant_id, TenantId::from_store)?,
            thread_id: id("message thread id", self.thread_id, ContextId::parse)?,
            seq: self.seq,
            message_id: self
                .message_id
                .map(|m| id("message id", m, MessageId::parse))
                .transpose()?,
            task_id: self
                .task_id
                .map(|t| id("message task id", t, TaskId::parse))
                .transpose()?,
            role: self.role,
            author: self.author,
            content: if self.content.is_empty() {
                Part::text_of(&parts)
            } else {
                self.content
            },
            parts,
            tool_calls: decode("tool calls", &self.tool_calls)?,
            metadata: decode_opt("message metadata", self.metadata.as_deref())?,
            created_at: Timestamp(self.created_at),
            extensions,
            reference_task_ids,
        })
    }

    fn extensions(&self) -> Result<Vec<String>, StoreError> {
        Ok(decode_opt("message extensions", self.extensions.as_deref())?.unwrap_or_default())
    }

    fn reference_task_ids(&self) -> Result<Vec<TaskId>, StoreError> {
        Ok(decode_opt("referenced tasks", self.reference_task_ids.as_deref())?.unwrap_or_default())
    }

    /// The A2A message this row records, as an entry of `task`'s history. Messages the
    /// session layer stored without an A2A id get a fresh one: A2A requires an id, and
    /// nothing refers to such a message by it.
    pub(in crate::store) fn to_history_message(
        &self,
        task: &TaskId,
    ) -> Result<Message, StoreError> {
        self.to_message(Some(task))
    }

    /// The A2A message this row records, of `task` or of none (a reply without a task).
    pub(in crate::store) fn to_message(
        &self,
        task: Option<&TaskId>,
    ) -> Result<Message, StoreError> {
        Ok(Message {
            message_id: match &self.message_id {
                Some(m) => id("message id", m.clone(), MessageId::parse)?,
                None => MessageId::generate(),
            },
            context_id: Some(id(
                "message thread id",
                self.thread_id.clone(),
                ContextId::parse,
            )?),
            task_id: task.cloned(),
            role: if self.role == "user" {
                Role::User
            } else {
                Role::Agent
            },
            parts: decode("message parts", &self.parts)?,
            metadata: decode_opt("message metadata", self.metadata.as_deref())?,
            extensions: self.extensions()?,
            reference_task_ids: self.reference_task_ids()?,
        })
    }
}
