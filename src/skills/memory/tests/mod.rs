//! Tests of the memory engine and skill against real repositories (both backends via
//! `on_both_memory_backends!`), a real governance `Validator` implementation and a real
//! HTTP embeddings server on 127.0.0.1.

use std::sync::{Arc, Mutex};

use crate::config::MemorySettings;
use crate::domain::TenantId;
use crate::skills::SkillError;
use crate::skills::governance::{
    EvalContext, Report, Scope, Severity, Target, Validator, Violation,
};
use crate::skills::memory::{AddMemory, MemoryRef, SearchMemories};
use crate::store::memories::{MemoryLayer, MemoryRepository, ScopeField, ScopeIds};

use super::MemoryEngine;

mod embeddings;
mod embeddings_server;
mod search;
mod skill;
mod writes;

fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).unwrap()
}

fn ids(pairs: &[(ScopeField, &str)]) -> ScopeIds {
    pairs.iter().fold(ScopeIds::new(), |acc, (field, value)| {
        acc.with(*field, *value)
    })
}

fn add(layer: MemoryLayer, content: &str, ids: &ScopeIds) -> AddMemory {
    AddMemory {
        content: content.into(),
        layer,
        tags: None,
        metadata: None,
        ids: ids.clone(),
    }
}

fn search(query: &str, ids: &ScopeIds) -> SearchMemories {
    SearchMemories {
        query: query.into(),
        layers: None,
        tags: None,
        limit: None,
        threshold: None,
        ids: ids.clone(),
    }
}

fn reference(memory_id: &str, ids: &ScopeIds) -> MemoryRef {
    MemoryRef {
        memory_id: memory_id.into(),
        ids: ids.clone(),
    }
}

fn invalid_naming(result: Result<impl std::fmt::Debug, SkillError>, field: &str) {
    match result {
        Err(SkillError::InvalidArguments(message)) => {
            assert!(message.contains(field), "{message:?} should name {field}")
        }
        other => panic!("expected InvalidArguments naming {field}, got {other:?}"),
    }
}

fn settings() -> MemorySettings {
    MemorySettings {
        default_limit: 10,
        max_limit: 50,
        max_content_bytes: 1024,
        ..MemorySettings::default()
    }
}

fn engine(repo: Arc<dyn MemoryRepository>) -> MemoryEngine {
    MemoryEngine::new(repo, settings(), None).unwrap()
}

/// Blocks content mentioning a password, warns about "maybe"; records what it was asked.
#[derive(Default)]
struct KeywordValidator {
    calls: Mutex<Vec<(String, Scope, Option<String>)>>,
}

impl Validator for KeywordValidator {
    fn validate(&self, tenant: &str, scope: &Scope, ctx: &EvalContext) -> Report {
        self.calls
            .lock()
            .unwrap()
            .push((tenant.to_owned(), scope.clone(), ctx.content.clone()));
        let content = ctx.content.clone().unwrap_or_default();
        let violation = |rule: &str, severity, message: &str| Violation {
            rule_id: rule.into(),
            policy_id: Some("security".into()),
            severity,
            target: Target::Content,
            message: message.into(),
        };
        let mut violations = Vec::new();
        if content.contains("password") {
            violations.push(violation(
                "no-secrets",
                Severity::Block,
                "memories must not contain passwords",
            ));
        }
        if content.contains("maybe") {
            violations.push(violation("be-sure", Severity::Warn, "be sure"));
        }
        Report::from_violations(violations)
    }
}
