//! The `push_outbox` table: the deliveries still owed, written and read.

use diesel::QueryableByName;

use super::push_configs::PushConfigRow;
use super::{decode, encode};
use crate::domain::{PushPayload, TaskId, TenantId, Timestamp};
use crate::store::{Delivery, OutboxKey, StoreError};

pub(in crate::store) struct NewOutboxRow<'a> {
    pub(in crate::store) tenant_id: &'a str,
    pub(in crate::store) task_id: &'a str,
    pub(in crate::store) config_id: &'a str,
    pub(in crate::store) seq: i64,
    pub(in crate::store) payload: String,
    pub(in crate::store) created_at: i64,
    pub(in crate::store) attempts: i64,
    pub(in crate::store) next_attempt_at: i64,
}

impl<'a> NewOutboxRow<'a> {
    pub(in crate::store) fn new(
        tenant: &'a TenantId,
        task_id: &'a TaskId,
        config_id: &'a str,
        seq: i64,
        payload: &PushPayload,
        created_at: Timestamp,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            tenant_id: tenant.as_str(),
            task_id: task_id.as_str(),
            config_id,
            seq,
            payload: encode("push payload", payload)?,
            created_at: created_at.millis(),
            attempts: 0,
            next_attempt_at: created_at.millis(),
        })
    }
}

/// A due outbox row joined with its config (`Store::due_deliveries`).
#[derive(QueryableByName)]
pub(in crate::store) struct DeliveryRow {
    #[diesel(embed)]
    config: PushConfigRow,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    seq: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    payload: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    logged_at: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    attempts: i64,
}

impl DeliveryRow {
    pub(in crate::store) fn into_delivery(self) -> Result<Delivery, StoreError> {
        let config = self.config.into_config()?;
        Ok(Delivery {
            key: OutboxKey {
                tenant: config.tenant.clone(),
                task_id: config.task_id.clone(),
                config_id: config.id.clone(),
                seq: self.seq,
            },
            payload: decode("push payload", &self.payload)?,
            created_at: Timestamp(self.logged_at),
            attempts: self.attempts,
            config: std::sync::Arc::new(config),
        })
    }
}

/// An owed delivery with when it is next due (`reads::owed_deliveries`).
#[derive(diesel::QueryableByName)]
pub(in crate::store) struct OwedRow {
    #[diesel(embed)]
    delivery: DeliveryRow,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    next_attempt_at: i64,
}

impl OwedRow {
    pub(in crate::store) fn into_owed(self) -> Result<(Delivery, Timestamp), StoreError> {
        Ok((
            self.delivery.into_delivery()?,
            Timestamp(self.next_attempt_at),
        ))
    }
}
