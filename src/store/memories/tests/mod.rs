//! Behaviour tests of the memory repository, written once and run against both real
//! backends (`on_both_memory_backends!`): Postgres on a fresh database per test, SQLite on
//! a temporary file.

use serde_json::Map;

use super::{MemoryLayer, MemoryScope, NewMemory, ScopeField, ScopeIds};
use crate::domain::{TenantId, Timestamp};

mod crud;
mod hash;
mod hold;
mod isolation;
mod search;

fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).unwrap()
}

fn scope(layer: MemoryLayer, ids: &[(ScopeField, &str)]) -> MemoryScope {
    let ids = ids.iter().fold(ScopeIds::new(), |acc, (field, value)| {
        acc.with(*field, *value)
    });
    MemoryScope::new(layer, &ids).unwrap()
}

fn user(id: &str) -> MemoryScope {
    scope(MemoryLayer::User, &[(ScopeField::UserId, id)])
}

fn memory(tenant: &TenantId, scope: &MemoryScope, content: &str) -> NewMemory {
    NewMemory {
        tenant: tenant.clone(),
        scope: scope.clone(),
        content: content.to_owned(),
        tags: Vec::new(),
        metadata: Map::new(),
        importance: 0.5,
        embedding: None,
        at: Timestamp(1_000),
    }
}

fn metadata(value: serde_json::Value) -> Map<String, serde_json::Value> {
    match value {
        serde_json::Value::Object(map) => map,
        _ => panic!("metadata must be an object"),
    }
}
