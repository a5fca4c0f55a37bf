//! The governance engine: the policies of the configuration plus those of a
//! [`PolicySource`] (accepted knowledge items of type `policy`), layered per scope
//! ([`effective`]), evaluated against writes ([`Validator`]) and listed
//! as the constraints in force ([`GovernanceEngine::constraints`]).
//!
//! Configuration policies are compiled once, in [`GovernanceEngine::new`], and an invalid
//! one refuses to start the engine. Source policies change as knowledge items are
//! accepted, so they are fetched and compiled on every call; an invalid one is left out
//! (with a warning) rather than failing every check, and reported by
//! [`GovernanceEngine::effective`].
//!
//! **Architecture invariant:** a mandatory policy, once in force at a layer, is in force
//! at every more specific layer, whatever policies those layers declare.

use std::sync::Arc;

use serde::Serialize;

use super::effective::{self, CompiledPolicy, EffectivePolicies, InvalidPolicy, PolicyOrigin};
use super::rules::{
    EvalContext, Layer, Mode, Operator, PolicySource, PolicySpec, Report, RuleError, Scope,
    Severity, Target, Validator,
};

/// Evaluates the policies in force for a tenant at a scope.
pub struct GovernanceEngine {
    config: Vec<Arc<CompiledPolicy>>,
    source: Option<Arc<dyn PolicySource>>,
}

/// One rule in force at a scope, with the policy it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveConstraint {
    pub policy_id: String,
    pub layer: Layer,
    pub mode: Mode,
    pub origin: PolicyOrigin,
    pub rule_id: String,
    pub target: Target,
    pub operator: Operator,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub severity: Severity,
    pub message: String,
}

impl GovernanceEngine {
    /// Compiles every configuration policy; the error names the policy and the rule.
    pub fn new(
        config_policies: Vec<PolicySpec>,
        source: Option<Arc<dyn PolicySource>>,
    ) -> Result<Self, RuleError> {
        let config = config_policies
            .into_iter()
            .map(|spec| CompiledPolicy::compile(spec, PolicyOrigin::Config).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { config, source })
    }

    /// The policies in force for `tenant` at `scope` (most specific layer first), those
    /// set aside by the layering, and the tenant's source policies that apply there but
    /// do not compile.
    pub fn effective(&self, tenant: &str, scope: &Scope) -> EffectivePolicies {
        let mut candidates = self.config.clone();
        let mut invalid = Vec::new();
        let fetched = self
            .source
            .as_ref()
            .map(|source| source.policies(tenant))
            .unwrap_or_default();
        for spec in fetched {
            if !spec.applies_at(scope) {
                continue;
            }
            let (policy_id, layer) = (spec.id.clone(), spec.layer);
            match CompiledPolicy::compile(spec, PolicyOrigin::Knowledge) {
                Ok(policy) => candidates.push(Arc::new(policy)),
                Err(error) => {
                    tracing::warn!(
                        tenant,
                        policy = %policy_id,
                        %layer,
                        %error,
                        "skipping a source policy whose rules do not compile"
                    );
                    invalid.push(InvalidPolicy {
                        policy_id,
                        layer,
                        error: error.to_string(),
                    });
                }
            }
        }
        let mut resolved = effective::resolve(&candidates, scope);
        resolved.invalid = invalid;
        resolved
    }

    /// Every rule in force for `tenant` at `scope`, most specific layer first.
    pub fn constraints(&self, tenant: &str, scope: &Scope) -> Vec<ActiveConstraint> {
        self.effective(tenant, scope).constraints()
    }
}

impl EffectivePolicies {
    /// Every rule of the policies in force, in their order (most specific layer first).
    pub fn constraints(&self) -> Vec<ActiveConstraint> {
        self.in_force
            .iter()
            .flat_map(|policy| {
                policy.rules.iter().map(move |rule| {
                    let spec = rule.spec();
                    ActiveConstraint {
                        policy_id: policy.id.clone(),
                        layer: policy.layer,
                        mode: policy.mode,
                        origin: policy.origin,
                        rule_id: spec.id.clone(),
                        target: spec.target,
                        operator: spec.operator,
                        value: spec.value.clone(),
                        severity: spec.severity,
                        message: spec.message.clone(),
                    }
                })
            })
            .collect()
    }
}

impl Validator for GovernanceEngine {
    fn validate(&self, tenant: &str, scope: &Scope, ctx: &EvalContext) -> Report {
        let effective = self.effective(tenant, scope);
        let violations = effective
            .in_force
            .iter()
            .flat_map(|policy| {
                policy
                    .rules
                    .iter()
                    .filter_map(|rule| rule.check(ctx, Some(&policy.id)))
            })
            .collect();
        Report::from_violations(violations)
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
