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
mod tests {
    //! Tests of [`GovernanceEngine`]: operators and severities through the engine, layering
    //! and scopes as a check sees them, and policies from a [`PolicySource`].

    use std::collections::HashMap;

    use super::*;
    use crate::skills::governance::effective::SetAsideReason;
    use crate::skills::governance::rules::RuleSpec;

    use Operator::*;
    use Severity::*;
    use Target::*;

    fn rule(
        id: &str,
        target: Target,
        operator: Operator,
        value: Option<&str>,
        severity: Severity,
    ) -> RuleSpec {
        RuleSpec {
            id: id.into(),
            target,
            operator,
            value: value.map(str::to_owned),
            severity,
            message: format!("{id} broken"),
        }
    }

    fn policy(id: &str, layer: Layer, mode: Mode, rules: Vec<RuleSpec>) -> PolicySpec {
        PolicySpec {
            id: id.into(),
            layer,
            mode,
            scope_id: None,
            description: None,
            rules,
        }
    }

    fn engine(policies: Vec<PolicySpec>) -> GovernanceEngine {
        GovernanceEngine::new(policies, None).unwrap()
    }

    /// The rule ids violated, in report order.
    fn broken(engine: &GovernanceEngine, scope: &Scope, ctx: &EvalContext) -> Vec<String> {
        engine
            .validate("t1", scope, ctx)
            .violations
            .into_iter()
            .map(|v| v.rule_id)
            .collect()
    }

    /// Per-tenant policies, as the knowledge engine would serve them.
    struct FixedSource(HashMap<String, Vec<PolicySpec>>);

    impl PolicySource for FixedSource {
        fn policies(&self, tenant: &str) -> Vec<PolicySpec> {
            self.0.get(tenant).cloned().unwrap_or_default()
        }
    }

    fn with_source(
        config: Vec<PolicySpec>,
        tenant: &str,
        source: Vec<PolicySpec>,
    ) -> GovernanceEngine {
        let source = FixedSource(HashMap::from([(tenant.to_owned(), source)]));
        GovernanceEngine::new(config, Some(Arc::new(source))).unwrap()
    }

    #[test]
    fn every_operator_and_target_through_the_engine() {
        let e = engine(vec![policy(
            "all",
            Layer::Company,
            Mode::Mandatory,
            vec![
                rule("use-tokio", Dependency, MustUse, Some("tokio"), Warn),
                rule("no-openssl", Dependency, MustNotUse, Some("openssl"), Warn),
                rule("rs-path", Path, MustMatch, Some(r"\.rs$"), Warn),
                rule(
                    "no-secret",
                    Content,
                    MustNotMatch,
                    Some(r"(?i)password\s*="),
                    Warn,
                ),
                rule("has-content", Content, MustExist, None, Warn),
                rule("no-shell", Tool, MustNotExist, None, Warn),
            ],
        )]);
        let good = EvalContext {
            content: Some("fn main() {}".into()),
            path: Some("src/main.rs".into()),
            dependencies: vec!["tokio".into(), "serde".into()],
            tools: vec![],
        };
        assert!(broken(&e, &Scope::default(), &good).is_empty());
        let bad = EvalContext {
            content: Some("PASSWORD = hunter2".into()),
            path: Some("notes.txt".into()),
            dependencies: vec!["openssl".into()],
            tools: vec!["shell".into()],
        };
        assert_eq!(
            broken(&e, &Scope::default(), &bad),
            [
                "use-tokio",
                "no-openssl",
                "rs-path",
                "no-secret",
                "no-shell"
            ]
        );
        assert_eq!(
            broken(&e, &Scope::default(), &EvalContext::default()),
            ["use-tokio", "rs-path", "has-content"],
            "an empty input has nothing to use, match or exist"
        );
    }

    #[test]
    fn counts_per_severity_and_only_block_fails() {
        let r = |id, severity| rule(id, Content, MustNotUse, Some("x"), severity);
        let e = engine(vec![
            policy(
                "soft",
                Layer::Team,
                Mode::Optional,
                vec![r("i1", Info), r("w1", Warn), r("w2", Warn)],
            ),
            policy("hard", Layer::Org, Mode::Mandatory, vec![r("b1", Block)]),
        ]);
        let report = e.validate(
            "t1",
            &Scope::default(),
            &EvalContext::content("x marks the spot"),
        );
        assert!(!report.passed);
        assert_eq!(
            (report.counts.info, report.counts.warn, report.counts.block),
            (1, 2, 1)
        );
        let policies: Vec<_> = report
            .violations
            .iter()
            .map(|v| v.policy_id.as_deref())
            .collect();
        assert_eq!(
            policies,
            [Some("soft"), Some("soft"), Some("soft"), Some("hard")]
        );

        let soft_only = engine(vec![policy(
            "soft",
            Layer::Team,
            Mode::Optional,
            vec![r("i1", Info), r("w1", Warn)],
        )]);
        let report = soft_only.validate("t1", &Scope::default(), &EvalContext::content("x"));
        assert!(report.passed, "info and warn findings do not fail a check");
        assert_eq!(report.violations.len(), 2);
        assert!(
            e.validate("t1", &Scope::default(), &EvalContext::content("clean"))
                .passed
        );
    }

    #[test]
    fn a_project_cannot_override_a_mandatory_company_policy() {
        let block_unsafe = rule("no-unsafe", Content, MustNotUse, Some("unsafe"), Block);
        let allow_all = rule("anything", Content, MustNotUse, Some("never-written"), Info);
        let e = engine(vec![
            policy(
                "safety",
                Layer::Company,
                Mode::Mandatory,
                vec![block_unsafe],
            ),
            policy("safety", Layer::Project, Mode::Optional, vec![allow_all]),
        ]);
        let report = e.validate("t1", &Scope::default(), &EvalContext::content("unsafe { }"));
        assert!(!report.passed, "the company rule still blocks");
        assert_eq!(report.violations[0].rule_id, "no-unsafe");
        let effective = e.effective("t1", &Scope::default());
        assert_eq!(effective.set_aside.len(), 1);
        assert_eq!(effective.set_aside[0].layer, Layer::Project);
        assert_eq!(
            effective.set_aside[0].reason,
            SetAsideReason::OverridesMandatory
        );
        let constraints = e.constraints("t1", &Scope::default());
        assert_eq!(constraints.len(), 1);
        assert_eq!(
            (constraints[0].layer, constraints[0].mode),
            (Layer::Company, Mode::Mandatory)
        );
    }

    #[test]
    fn an_optional_policy_is_replaced_at_a_more_specific_layer() {
        let strict = rule("max-strict", Content, MustNotUse, Some("unwrap"), Block);
        let relaxed = rule("relaxed", Content, MustNotUse, Some("unwrap"), Warn);
        let e = engine(vec![
            policy("style", Layer::Org, Mode::Optional, vec![strict]),
            policy("style", Layer::Team, Mode::Optional, vec![relaxed]),
        ]);
        let report = e.validate("t1", &Scope::default(), &EvalContext::content("x.unwrap()"));
        assert!(report.passed);
        assert_eq!(
            broken(&e, &Scope::default(), &EvalContext::content("x.unwrap()")),
            ["relaxed"]
        );
    }

    #[test]
    fn a_project_scoped_policy_does_not_apply_to_another_project() {
        let mut only_alpha = policy(
            "alpha-rules",
            Layer::Project,
            Mode::Optional,
            vec![rule("no-todo", Content, MustNotMatch, Some("TODO"), Block)],
        );
        only_alpha.scope_id = Some("alpha".into());
        let e = engine(vec![only_alpha]);
        let project = |id: &str| Scope {
            project_id: Some(id.into()),
            ..Scope::default()
        };
        let ctx = EvalContext::content("TODO: later");
        assert!(!e.validate("t1", &project("alpha"), &ctx).passed);
        assert!(e.validate("t1", &project("beta"), &ctx).passed);
        assert!(e.constraints("t1", &project("beta")).is_empty());
    }

    #[test]
    fn source_policies_join_config_policies_per_tenant() {
        let config = vec![policy(
            "deps",
            Layer::Company,
            Mode::Mandatory,
            vec![rule(
                "no-openssl",
                Dependency,
                MustNotUse,
                Some("openssl"),
                Block,
            )],
        )];
        let source = vec![policy(
            "adr-7",
            Layer::Team,
            Mode::Optional,
            vec![rule(
                "use-tracing",
                Dependency,
                MustUse,
                Some("tracing"),
                Warn,
            )],
        )];
        let e = with_source(config, "acme", source);
        let ctx = EvalContext {
            dependencies: vec!["openssl".into()],
            ..EvalContext::default()
        };
        assert_eq!(broken_for(&e, "acme", &ctx), ["use-tracing", "no-openssl"]);
        assert_eq!(
            broken_for(&e, "other", &ctx),
            ["no-openssl"],
            "another tenant's knowledge does not apply"
        );
        let origins: Vec<_> = e
            .constraints("acme", &Scope::default())
            .iter()
            .map(|c| c.origin)
            .collect();
        assert_eq!(origins, [PolicyOrigin::Knowledge, PolicyOrigin::Config]);
    }

    fn broken_for(e: &GovernanceEngine, tenant: &str, ctx: &EvalContext) -> Vec<String> {
        e.validate(tenant, &Scope::default(), ctx)
            .violations
            .into_iter()
            .map(|v| v.rule_id)
            .collect()
    }

    #[test]
    fn a_source_policy_cannot_override_a_mandatory_config_policy() {
        let config = vec![policy(
            "secrets",
            Layer::Org,
            Mode::Mandatory,
            vec![rule(
                "no-key",
                Content,
                MustNotMatch,
                Some("AKIA[0-9A-Z]{16}"),
                Block,
            )],
        )];
        let source = vec![policy("secrets", Layer::Project, Mode::Optional, vec![])];
        let e = with_source(config, "acme", source);
        let report = e.validate(
            "acme",
            &Scope::default(),
            &EvalContext::content("key AKIAABCDEFGHIJKLMNOP"),
        );
        assert!(!report.passed);
    }

    #[test]
    fn an_invalid_source_policy_is_skipped_and_reported() {
        let broken_regex = policy(
            "bad",
            Layer::Team,
            Mode::Mandatory,
            vec![rule(
                "unclosed",
                Content,
                MustNotMatch,
                Some("(oops"),
                Block,
            )],
        );
        let fine = policy(
            "good",
            Layer::Team,
            Mode::Optional,
            vec![rule("no-fixme", Content, MustNotUse, Some("FIXME"), Block)],
        );
        let e = with_source(vec![], "acme", vec![broken_regex, fine]);
        let ctx = EvalContext::content("FIXME (oops");
        assert_eq!(
            broken_for(&e, "acme", &ctx),
            ["no-fixme"],
            "the valid policy still checks"
        );
        let effective = e.effective("acme", &Scope::default());
        assert_eq!(effective.invalid.len(), 1);
        assert_eq!(effective.invalid[0].policy_id, "bad");
        assert!(
            effective.invalid[0].error.contains("unclosed"),
            "{}",
            effective.invalid[0].error
        );
        let ids: Vec<_> = effective.in_force.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["good"]);
    }

    #[test]
    fn an_invalid_config_regex_is_refused_naming_policy_and_rule() {
        let bad = policy(
            "naming",
            Layer::Company,
            Mode::Optional,
            vec![rule("snake", Path, MustMatch, Some("[a-z"), Warn)],
        );
        let Err(err) = GovernanceEngine::new(vec![bad], None) else {
            panic!("an invalid regex must be refused");
        };
        assert!(
            matches!(&err, RuleError::InPolicy { policy_id, error } if policy_id == "naming" && matches!(**error, RuleError::InvalidRegex { .. }))
        );
        assert!(err.to_string().contains("rule snake"), "{err}");
    }
}
