//! The `push_configs` table: a task's push-notification configs, written and read.

use diesel::QueryableByName;

use super::id;
use crate::domain::{PushAuth, PushConfig, PushDialect, TaskId, TenantId, Timestamp};
use crate::store::StoreError;
use crate::store::schema::push_configs;
use crate::store::statement::{Dialect, List, Statement};

/// The push configs of the tenant's tasks `ids` (not empty), by task, then in the order
/// they were registered: [`PushConfigRow`]s.
pub(in crate::store) fn of_tasks(d: Dialect, tenant: &str, ids: &[&str]) -> Statement {
    let mut st = Statement::new(
        d,
        "SELECT tenant_id, task_id, config_id, dialect, url, token, auth_scheme, \
         auth_credentials, created_at FROM push_configs WHERE tenant_id = ",
    );
    st.text(tenant)
        .push(" AND ")
        .any("task_id", List::ids(ids.iter().copied()));
    st.push(" ORDER BY task_id, created_at, config_id");
    st
}

pub(in crate::store) struct NewPushConfig<'a> {
    pub(in crate::store) tenant_id: &'a str,
    pub(in crate::store) task_id: &'a str,
    pub(in crate::store) config_id: &'a str,
    pub(in crate::store) dialect: &'static str,
    pub(in crate::store) url: &'a str,
    pub(in crate::store) token: Option<&'a str>,
    pub(in crate::store) auth_scheme: Option<&'a str>,
    pub(in crate::store) auth_credentials: Option<&'a str>,
    pub(in crate::store) created_at: i64,
}

impl<'a> NewPushConfig<'a> {
    pub(in crate::store) fn new(c: &'a PushConfig) -> Self {
        Self {
            tenant_id: c.tenant.as_str(),
            task_id: c.task_id.as_str(),
            config_id: &c.id,
            dialect: c.dialect.as_str(),
            url: &c.url,
            token: c.token.as_deref(),
            auth_scheme: c.auth.as_ref().map(|a| a.scheme.as_str()),
            auth_credentials: c.auth.as_ref().and_then(|a| a.credentials.as_deref()),
            created_at: c.created_at.millis(),
        }
    }
}

#[derive(QueryableByName)]
#[diesel(table_name = push_configs)]
pub(in crate::store) struct PushConfigRow {
    tenant_id: String,
    task_id: String,
    config_id: String,
    dialect: String,
    url: String,
    token: Option<String>,
    auth_scheme: Option<String>,
    auth_credentials: Option<String>,
    created_at: i64,
}

impl PushConfigRow {
    pub(in crate::store) fn into_config(self) -> Result<PushConfig, StoreError> {
        let dialect = PushDialect::parse(&self.dialect).ok_or_else(|| {
            StoreError::Corrupt(format!("push config dialect {:?}", self.dialect))
        })?;
        Ok(PushConfig {
            tenant: id("push config tenant", self.tenant_id, TenantId::from_store)?,
            task_id: id("push config task", self.task_id, TaskId::parse)?,
            id: self.config_id,
            url: self.url,
            token: self.token,
            auth: self.auth_scheme.map(|scheme| PushAuth {
                scheme,
                credentials: self.auth_credentials,
            }),
            dialect,
            created_at: Timestamp(self.created_at),
        })
    }
}
