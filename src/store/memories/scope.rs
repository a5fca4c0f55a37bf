//! Layers and scopes: who a memory belongs to.
//!
//! A memory lives in one layer (`agent, user, session, project, team, org, company`, most
//! specific first) and is keyed by exactly the ids that layer requires — an `agent`
//! memory by agent and user, a `session` memory by user and session, a `project` memory
//! by project, and so on. [`MemoryScope`] can only be built from ids that satisfy its
//! layer ("parse, don't validate"), so every query the repository runs is filtered by a
//! complete scope and a user never reaches another user's memories.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest scope id accepted (the same bound as every other client-supplied id).
pub const MAX_SCOPE_ID_LEN: usize = 256;

/// The memory layers, most specific first. One casing on the wire: lowercase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryLayer {
    Agent,
    User,
    Session,
    Project,
    Team,
    Org,
    Company,
}

impl MemoryLayer {
    /// Every layer in precedence order (most specific first).
    pub const ALL: [MemoryLayer; 7] = [
        MemoryLayer::Agent,
        MemoryLayer::User,
        MemoryLayer::Session,
        MemoryLayer::Project,
        MemoryLayer::Team,
        MemoryLayer::Org,
        MemoryLayer::Company,
    ];

    /// The wire and storage name.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryLayer::Agent => "agent",
            MemoryLayer::User => "user",
            MemoryLayer::Session => "session",
            MemoryLayer::Project => "project",
            MemoryLayer::Team => "team",
            MemoryLayer::Org => "org",
            MemoryLayer::Company => "company",
        }
    }

    /// The layer named exactly `name` (lowercase; other casings are refused).
    pub fn parse(name: &str) -> Option<MemoryLayer> {
        MemoryLayer::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// 1 for the most specific layer (agent) to 7 for the broadest (company); search
    /// results are ranked by this first.
    pub fn precedence(self) -> u8 {
        match self {
            MemoryLayer::Agent => 1,
            MemoryLayer::User => 2,
            MemoryLayer::Session => 3,
            MemoryLayer::Project => 4,
            MemoryLayer::Team => 5,
            MemoryLayer::Org => 6,
            MemoryLayer::Company => 7,
        }
    }

    /// The ids a memory of this layer is keyed by.
    pub fn required_ids(self) -> &'static [ScopeField] {
        match self {
            MemoryLayer::Agent => &[ScopeField::AgentId, ScopeField::UserId],
            MemoryLayer::User => &[ScopeField::UserId],
            MemoryLayer::Session => &[ScopeField::UserId, ScopeField::SessionId],
            MemoryLayer::Project => &[ScopeField::ProjectId],
            MemoryLayer::Team => &[ScopeField::TeamId],
            MemoryLayer::Org => &[ScopeField::OrgId],
            MemoryLayer::Company => &[ScopeField::CompanyId],
        }
    }
}

impl fmt::Display for MemoryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of the seven scope ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeField {
    AgentId,
    UserId,
    SessionId,
    ProjectId,
    TeamId,
    OrgId,
    CompanyId,
}

impl ScopeField {
    /// In column order.
    pub const ALL: [ScopeField; 7] = [
        ScopeField::AgentId,
        ScopeField::UserId,
        ScopeField::SessionId,
        ScopeField::ProjectId,
        ScopeField::TeamId,
        ScopeField::OrgId,
        ScopeField::CompanyId,
    ];

    /// The camelCase argument name (`agentId`, …).
    pub fn wire_name(self) -> &'static str {
        match self {
            ScopeField::AgentId => "agentId",
            ScopeField::UserId => "userId",
            ScopeField::SessionId => "sessionId",
            ScopeField::ProjectId => "projectId",
            ScopeField::TeamId => "teamId",
            ScopeField::OrgId => "orgId",
            ScopeField::CompanyId => "companyId",
        }
    }

    /// The column of `memories` holding it.
    pub fn column(self) -> &'static str {
        match self {
            ScopeField::AgentId => "agent_id",
            ScopeField::UserId => "user_id",
            ScopeField::SessionId => "session_id",
            ScopeField::ProjectId => "project_id",
            ScopeField::TeamId => "team_id",
            ScopeField::OrgId => "org_id",
            ScopeField::CompanyId => "company_id",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The scope ids a caller gave; any may be absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeIds {
    values: [Option<String>; 7],
}

impl ScopeIds {
    /// No ids.
    pub fn new() -> Self {
        Self::default()
    }

    /// These ids with `field` set to `value`.
    pub fn with(mut self, field: ScopeField, value: impl Into<String>) -> Self {
        self.set(field, value.into());
        self
    }

    /// Sets (or replaces) one id.
    pub fn set(&mut self, field: ScopeField, value: String) {
        self.values[field.index()] = Some(value);
    }

    /// One id, if given.
    pub fn get(&self, field: ScopeField) -> Option<&str> {
        self.values[field.index()].as_deref()
    }

    /// Whether every id `layer` requires is present.
    pub fn covers(&self, layer: MemoryLayer) -> bool {
        layer.required_ids().iter().all(|f| self.get(*f).is_some())
    }

    /// The layers whose required ids are all present, most specific first.
    pub fn covered_layers(&self) -> Vec<MemoryLayer> {
        MemoryLayer::ALL
            .into_iter()
            .filter(|l| self.covers(*l))
            .collect()
    }
}

/// Why a scope could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("{}: required by the {layer} layer", field.wire_name())]
    Missing {
        layer: MemoryLayer,
        field: ScopeField,
    },
    #[error("{}: {reason}", field.wire_name())]
    Invalid {
        field: ScopeField,
        reason: &'static str,
    },
}

/// Checks one id the way every client-supplied id is checked: non-empty, bounded,
/// printable.
pub fn check_scope_id(field: ScopeField, value: &str) -> Result<(), ScopeError> {
    let reason = if value.is_empty() {
        "must not be empty"
    } else if value.len() > MAX_SCOPE_ID_LEN {
        "must be at most 256 bytes"
    } else if value.chars().any(char::is_control) {
        "must not contain control characters"
    } else {
        return Ok(());
    };
    Err(ScopeError::Invalid { field, reason })
}

/// A layer and exactly the ids it is keyed by (the others are empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemoryScope {
    layer: MemoryLayer,
    /// Indexed by [`ScopeField`]; `""` for the ids the layer is not keyed by.
    columns: [String; 7],
}

impl MemoryScope {
    /// The scope of `layer` taken from `ids`; ids the layer does not use are ignored.
    pub fn new(layer: MemoryLayer, ids: &ScopeIds) -> Result<MemoryScope, ScopeError> {
        let mut columns: [String; 7] = Default::default();
        for &field in layer.required_ids() {
            let value = ids.get(field).ok_or(ScopeError::Missing { layer, field })?;
            check_scope_id(field, value)?;
            columns[field.index()] = value.to_owned();
        }
        Ok(MemoryScope { layer, columns })
    }

    /// The layer this scope belongs to.
    pub fn layer(&self) -> MemoryLayer {
        self.layer
    }

    /// The id of `field`, if this scope is keyed by it.
    pub fn id(&self, field: ScopeField) -> Option<&str> {
        Some(self.columns[field.index()].as_str()).filter(|v| !v.is_empty())
    }

    /// The stored value of every scope column, in [`ScopeField::ALL`] order.
    pub(crate) fn columns(&self) -> &[String; 7] {
        &self.columns
    }

    /// Rebuilds a scope from stored columns; `None` unless exactly the layer's ids are
    /// set.
    pub(crate) fn from_columns(layer: MemoryLayer, columns: [String; 7]) -> Option<MemoryScope> {
        let required = layer.required_ids();
        let consistent = ScopeField::ALL
            .into_iter()
            .all(|f| required.contains(&f) != columns[f.index()].is_empty());
        consistent.then_some(MemoryScope { layer, columns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_have_one_lowercase_name_and_a_strict_order() {
        for (i, layer) in MemoryLayer::ALL.into_iter().enumerate() {
            assert_eq!(MemoryLayer::parse(layer.as_str()), Some(layer));
            assert_eq!(usize::from(layer.precedence()), i + 1);
            assert_eq!(
                serde_json::to_value(layer).unwrap(),
                serde_json::json!(layer.as_str())
            );
        }
        assert_eq!(MemoryLayer::parse("User"), None);
        assert!(serde_json::from_value::<MemoryLayer>(serde_json::json!("Session")).is_err());
    }

    #[test]
    fn a_scope_keeps_only_its_layers_ids() {
        let ids = ScopeIds::new()
            .with(ScopeField::AgentId, "a1")
            .with(ScopeField::UserId, "u1")
            .with(ScopeField::ProjectId, "p1");
        let agent = MemoryScope::new(MemoryLayer::Agent, &ids).unwrap();
        assert_eq!(agent.id(ScopeField::AgentId), Some("a1"));
        assert_eq!(agent.id(ScopeField::UserId), Some("u1"));
        assert_eq!(agent.id(ScopeField::ProjectId), None);
        let user = MemoryScope::new(MemoryLayer::User, &ids).unwrap();
        assert_eq!(user.id(ScopeField::AgentId), None);
        assert_eq!(
            ids.covered_layers(),
            [MemoryLayer::Agent, MemoryLayer::User, MemoryLayer::Project]
        );
    }

    #[test]
    fn missing_and_invalid_ids_are_named() {
        let ids = ScopeIds::new().with(ScopeField::UserId, "u1");
        let err = MemoryScope::new(MemoryLayer::Session, &ids).unwrap_err();
        assert_eq!(err.to_string(), "sessionId: required by the session layer");
        let ids = ids.with(ScopeField::SessionId, "");
        let err = MemoryScope::new(MemoryLayer::Session, &ids).unwrap_err();
        assert_eq!(err.to_string(), "sessionId: must not be empty");
        let ids = ScopeIds::new().with(ScopeField::TeamId, "x".repeat(257));
        assert!(MemoryScope::new(MemoryLayer::Team, &ids).is_err());
    }

    #[test]
    fn stored_columns_must_match_the_layer() {
        let mut columns: [String; 7] = Default::default();
        columns[ScopeField::UserId.index()] = "u1".into();
        assert!(MemoryScope::from_columns(MemoryLayer::User, columns.clone()).is_some());
        assert!(MemoryScope::from_columns(MemoryLayer::Agent, columns.clone()).is_none());
        columns[ScopeField::TeamId.index()] = "t1".into();
        assert!(MemoryScope::from_columns(MemoryLayer::User, columns).is_none());
    }
}
