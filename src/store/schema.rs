//! The diesel schema, written by hand and shared by both backends.
//!
//! Only `Text`, `Packed` and `BigInt` (and their `Nullable`s) appear here, because those
//! are the types Postgres and SQLite agree on: JSON is stored as TEXT in the serde
//! encoding of the domain types, every instant as BIGINT epoch milliseconds, and ids (and
//! digests) as `Packed` text — bytes on Postgres, text on SQLite (`packed.rs`). It must match
//! `migrations/postgres` and `migrations/sqlite` column for column. Every table stays at
//! or under 16 columns so diesel needs no `32-column-tables` feature.

diesel::table! {
    use diesel::sql_types::*;
    use super::super::packed::Packed;

    /// One conversation thread (an A2A `contextId`) of a tenant.
    threads (tenant_id, thread_id) {
        tenant_id -> Text,
        thread_id -> Packed,
        created_at -> BigInt,
        updated_at -> BigInt,
        expires_at -> BigInt,
        /// `active` or `expired`.
        status -> Text,
        /// The thread's state map, a JSON object.
        conversation_context -> Text,
        /// Cluster mode: the node serving the thread (NULL: none, and always on SQLite).
        owner_node -> Nullable<Text>,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use super::super::packed::Packed;

    /// The ordered history of a thread; `seq` is monotonic per thread from 1.
    messages (tenant_id, thread_id, seq) {
        tenant_id -> Text,
        thread_id -> Packed,
        seq -> BigInt,
        message_id -> Nullable<Packed>,
        task_id -> Nullable<Packed>,
        role -> Text,
        author -> Nullable<Text>,
        /// The message's text, or `''` when that is the text of its parts (every A2A
        /// message): stored once, in `parts`.
        content -> Text,
        /// JSON array of `domain::Part`.
        parts -> Text,
        /// JSON array of tool-call entries.
        tool_calls -> Text,
        /// JSON object, or NULL.
        metadata -> Nullable<Text>,
        created_at -> BigInt,
        /// JSON array of the A2A message's extension URIs, or NULL for none.
        extensions -> Nullable<Text>,
        /// JSON array of the task ids the A2A message refers to, or NULL for none.
        reference_task_ids -> Nullable<Text>,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use super::super::packed::Packed;

    /// Tasks; their history is a list of references to their thread's messages.
    tasks (tenant_id, task_id) {
        tenant_id -> Text,
        task_id -> Packed,
        context_id -> Packed,
        /// `TaskState::as_str`.
        state -> Text,
        /// JSON `domain::Message` of a status message that is not an entry of the task's
        /// history (`status_entry`); NULL otherwise.
        status_message -> Nullable<Text>,
        status_timestamp -> BigInt,
        /// JSON array of `domain::Artifact`.
        artifacts -> Text,
        /// JSON array of `domain::Transition`.
        transitions -> Text,
        /// JSON object, or NULL.
        metadata -> Nullable<Text>,
        created_at -> BigInt,
        updated_at -> BigInt,
        /// The `seq`s of the task's history in its thread (`messages`), oldest first,
        /// comma-separated; `''` when empty.
        history -> Text,
        /// Which entry of `history` (from 0) is the task's status message, if one is.
        status_entry -> Nullable<BigInt>,
        /// The `seq` of the task's final status update when the row is that event (a
        /// terminal status with no metadata of its own): it is not in `task_events`, and
        /// reads build it from the row's status. NULL: every event is in the log.
        final_event_seq -> Nullable<BigInt>,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use super::super::packed::Packed;

    /// The durable per-task event log that stream resubscription replays.
    task_events (tenant_id, task_id, seq) {
        tenant_id -> Text,
        task_id -> Packed,
        seq -> BigInt,
        /// The serde tag of the event (`status_update`, `artifact_update`, `message`).
        kind -> Text,
        /// JSON `domain::StreamEvent`; without its status message when `message_seq`
        /// names it.
        payload -> Text,
        created_at -> BigInt,
        /// The status update's message, as message `seq` of the task's thread, or NULL.
        message_seq -> Nullable<BigInt>,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use super::super::packed::Packed;

    /// Push-notification configs, several per task.
    push_configs (tenant_id, task_id, config_id) {
        tenant_id -> Text,
        task_id -> Packed,
        config_id -> Text,
        /// `PushDialect::as_str`: which payload the receiver gets.
        dialect -> Text,
        url -> Text,
        token -> Nullable<Text>,
        auth_scheme -> Nullable<Text>,
        auth_credentials -> Nullable<Text>,
        created_at -> BigInt,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use super::super::packed::Packed;

    /// Deliveries still owed: one row per (config, task event), written with the event.
    push_outbox (tenant_id, task_id, config_id, seq) {
        tenant_id -> Text,
        task_id -> Packed,
        config_id -> Text,
        seq -> BigInt,
        /// JSON `domain::PushPayload`.
        payload -> Text,
        created_at -> BigInt,
        attempts -> BigInt,
        next_attempt_at -> BigInt,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use super::super::packed::Packed;

    /// The first message accepted under an idempotency key, per tenant.
    idempotency_keys (tenant_id, idem_key) {
        tenant_id -> Text,
        idem_key -> Packed,
        context_id -> Packed,
        task_id -> Packed,
        /// SHA-256 (hex) of the message as sent and the request metadata.
        digest -> Packed,
        /// JSON `domain::Message`, when the turn answered without a task and the reply
        /// is no row of its thread (`reply_seq`).
        reply -> Nullable<Text>,
        created_at -> BigInt,
        /// The reply, when the turn answered without a task, as message `seq` of the
        /// claim's thread (`context_id`).
        reply_seq -> Nullable<BigInt>,
    }
}

diesel::allow_tables_to_appear_in_same_query!(push_outbox, push_configs);
// `load_task` reads a task's row with its last event's `seq` as a subquery.
diesel::allow_tables_to_appear_in_same_query!(tasks, task_events);
