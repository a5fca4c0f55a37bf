//! Which policies are in force at a [`Scope`]: the layering of governance.
//!
//! Policies are keyed by id. Walking the layers from the broadest (company) to the most
//! specific (project), an *optional* policy is replaced by a policy with the same id at a
//! more specific layer, while a *mandatory* one stays in force whatever lower layers say:
//! their same-id policies are set aside and recorded. Policies with different ids all
//! apply. The original engine had this guard inverted (a lower layer could replace a
//! mandatory policy precisely when it asked to override it); the tests here pin the
//! intended behaviour.

use std::sync::Arc;

use serde::Serialize;

use super::rules::{self, Layer, Mode, PolicySpec, Rule, RuleError, Scope};

/// Where a policy comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyOrigin {
    /// `[[governance.policies]]` in the configuration: the same for every tenant.
    Config,
    /// The tenant's [`PolicySource`](super::rules::PolicySource) (accepted knowledge
    /// items of type `policy`), read on every check.
    Knowledge,
}

/// A policy whose rules are compiled, ready to evaluate.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    pub id: String,
    pub layer: Layer,
    pub mode: Mode,
    pub scope_id: Option<String>,
    pub description: Option<String>,
    pub origin: PolicyOrigin,
    pub rules: Vec<Rule>,
}

impl CompiledPolicy {
    /// Compiles every rule of `spec`; the error names the policy and the rule.
    pub fn compile(spec: PolicySpec, origin: PolicyOrigin) -> Result<Self, RuleError> {
        let rules = spec
            .rules
            .into_iter()
            .map(Rule::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| RuleError::InPolicy {
                policy_id: spec.id.clone(),
                error: Box::new(error),
            })?;
        Ok(Self {
            id: spec.id,
            layer: spec.layer,
            mode: spec.mode,
            scope_id: spec.scope_id,
            description: spec.description,
            origin,
            rules,
        })
    }

    /// Whether the policy is meant for `scope` (see [`PolicySpec::applies_at`]).
    pub fn applies_at(&self, scope: &Scope) -> bool {
        rules::applies_at(self.layer, self.scope_id.as_deref(), scope)
    }
}

/// Why a policy that applies at a scope is not in force there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SetAsideReason {
    /// It tried to replace a mandatory policy of a broader layer; the mandatory one stays.
    OverridesMandatory,
    /// It is optional and a policy with the same id at a more specific layer replaced it.
    Replaced,
    /// Another policy with the same id at the same layer won: a mandatory one over an
    /// optional one, otherwise the first (configuration before knowledge).
    Duplicate,
}

/// A policy that applies at a scope but is not in force there, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetAsidePolicy {
    pub policy_id: String,
    pub layer: Layer,
    pub origin: PolicyOrigin,
    pub reason: SetAsideReason,
    /// The layer of the same-id policy that is in force instead.
    pub in_force_layer: Layer,
}

/// A policy from the [`PolicySource`](super::rules::PolicySource) whose rules do not
/// compile. It is left out of every check (one bad knowledge item must not break them
/// all) and listed so that whoever owns it can fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvalidPolicy {
    pub policy_id: String,
    pub layer: Layer,
    /// What is wrong with it (which rule, which pattern).
    pub error: String,
}

/// The policies in force at a scope, most specific layer first, and the ones that apply
/// there but are not in force.
#[derive(Debug, Clone, Default)]
pub struct EffectivePolicies {
    pub in_force: Vec<Arc<CompiledPolicy>>,
    pub set_aside: Vec<SetAsidePolicy>,
    pub invalid: Vec<InvalidPolicy>,
}

/// Whether the newcomer replaces the policy in force or is set aside.
enum Decision {
    Replace(SetAsideReason),
    SetAside(SetAsideReason),
}

/// The policy in force with the same id as `newcomer`, which comes from the same or a
/// more specific layer, against `newcomer`.
fn decide(current: &CompiledPolicy, newcomer: &CompiledPolicy) -> Decision {
    if current.layer == newcomer.layer {
        // Two definitions at one layer: the stricter one wins, so a mandatory policy is
        // never lost to an optional duplicate; otherwise the first (the operator's own
        // configuration is listed before the tenant's knowledge).
        return match (current.mode, newcomer.mode) {
            (Mode::Optional, Mode::Mandatory) => Decision::Replace(SetAsideReason::Duplicate),
            _ => Decision::SetAside(SetAsideReason::Duplicate),
        };
    }
    match current.mode {
        Mode::Mandatory => Decision::SetAside(SetAsideReason::OverridesMandatory),
        Mode::Optional => Decision::Replace(SetAsideReason::Replaced),
    }
}

fn set_aside(
    policy: &CompiledPolicy,
    reason: SetAsideReason,
    in_force: &CompiledPolicy,
) -> SetAsidePolicy {
    SetAsidePolicy {
        policy_id: policy.id.clone(),
        layer: policy.layer,
        origin: policy.origin,
        reason,
        in_force_layer: in_force.layer,
    }
}

/// The policies of `candidates` in force at `scope` (`invalid` is left empty: compiling
/// is the caller's business). Within a layer, `candidates` order decides between
/// duplicates and is kept in the result.
pub fn resolve(candidates: &[Arc<CompiledPolicy>], scope: &Scope) -> EffectivePolicies {
    let mut in_force: Vec<Arc<CompiledPolicy>> = Vec::new();
    let mut set_aside_list = Vec::new();
    for layer in [Layer::Company, Layer::Org, Layer::Team, Layer::Project] {
        let at_layer = candidates
            .iter()
            .filter(|p| p.layer == layer && p.applies_at(scope));
        for newcomer in at_layer {
            let Some(slot) = in_force.iter().position(|p| p.id == newcomer.id) else {
                in_force.push(newcomer.clone());
                continue;
            };
            let current = &in_force[slot];
            match decide(current, newcomer) {
                Decision::SetAside(reason) => {
                    log_set_aside(newcomer, reason, current);
                    set_aside_list.push(set_aside(newcomer, reason, current));
                }
                Decision::Replace(reason) => {
                    log_set_aside(current, reason, newcomer);
                    set_aside_list.push(set_aside(current, reason, newcomer));
                    in_force[slot] = newcomer.clone();
                }
            }
        }
    }
    // Stable: within a layer the candidates' order survives.
    in_force.sort_by_key(|p| p.layer.precedence());
    EffectivePolicies {
        in_force,
        set_aside: set_aside_list,
        invalid: Vec::new(),
    }
}

fn log_set_aside(policy: &CompiledPolicy, reason: SetAsideReason, kept: &CompiledPolicy) {
    match reason {
        SetAsideReason::OverridesMandatory => tracing::info!(
            policy = %policy.id,
            layer = %policy.layer,
            mandatory_layer = %kept.layer,
            "ignored an attempt to override a mandatory policy from a more specific layer"
        ),
        SetAsideReason::Duplicate => tracing::warn!(
            policy = %policy.id,
            layer = %policy.layer,
            origin = ?policy.origin,
            "two policies share an id at one layer; this one is not in force"
        ),
        // A legitimate override: nothing to tell beyond debugging.
        SetAsideReason::Replaced => tracing::debug!(
            policy = %policy.id,
            layer = %policy.layer,
            by_layer = %kept.layer,
            "optional policy replaced by a more specific layer"
        ),
    }
}

#[cfg(test)]
mod tests {
    //! Tests of the layering: mandatory and optional policies across layers, scoped
    //! policies, duplicates at one layer, and compile errors.

    use super::*;
    use crate::skills::governance::rules::{Operator, RuleSpec, Severity, Target};

    fn policy(id: &str, layer: Layer, mode: Mode, scope_id: Option<&str>) -> Arc<CompiledPolicy> {
        policy_from(id, layer, mode, scope_id, PolicyOrigin::Config)
    }

    fn policy_from(
        id: &str,
        layer: Layer,
        mode: Mode,
        scope_id: Option<&str>,
        origin: PolicyOrigin,
    ) -> Arc<CompiledPolicy> {
        let spec = PolicySpec {
            id: id.into(),
            layer,
            mode,
            scope_id: scope_id.map(str::to_owned),
            description: None,
            rules: vec![RuleSpec {
                id: format!("{id}-{layer}"),
                target: Target::Content,
                operator: Operator::MustExist,
                value: None,
                severity: Severity::Warn,
                message: "m".into(),
            }],
        };
        Arc::new(CompiledPolicy::compile(spec, origin).unwrap())
    }

    fn in_force(e: &EffectivePolicies) -> Vec<(String, Layer)> {
        e.in_force.iter().map(|p| (p.id.clone(), p.layer)).collect()
    }

    #[test]
    fn a_lower_layer_cannot_replace_a_mandatory_policy() {
        let candidates = [
            policy("p", Layer::Project, Mode::Optional, None),
            policy("p", Layer::Company, Mode::Mandatory, None),
            policy("p", Layer::Team, Mode::Mandatory, None),
        ];
        let e = resolve(&candidates, &Scope::default());
        assert_eq!(in_force(&e), [("p".to_string(), Layer::Company)]);
        let reasons: Vec<_> = e.set_aside.iter().map(|s| (s.layer, s.reason)).collect();
        assert_eq!(
            reasons,
            [
                (Layer::Team, SetAsideReason::OverridesMandatory),
                (Layer::Project, SetAsideReason::OverridesMandatory),
            ]
        );
        assert!(
            e.set_aside
                .iter()
                .all(|s| s.in_force_layer == Layer::Company)
        );
    }

    #[test]
    fn an_optional_policy_is_replaced_by_a_more_specific_one_until_a_mandatory_one() {
        let candidates = [
            policy("p", Layer::Company, Mode::Optional, None),
            policy("p", Layer::Team, Mode::Mandatory, None),
            policy("p", Layer::Project, Mode::Optional, None),
            policy("q", Layer::Org, Mode::Optional, None),
            policy("q", Layer::Project, Mode::Optional, None),
        ];
        let e = resolve(&candidates, &Scope::default());
        assert_eq!(
            in_force(&e),
            [
                ("q".to_string(), Layer::Project),
                ("p".to_string(), Layer::Team)
            ]
        );
        let reasons: Vec<_> = e
            .set_aside
            .iter()
            .map(|s| (s.policy_id.as_str(), s.layer, s.reason))
            .collect();
        assert!(reasons.contains(&("p", Layer::Company, SetAsideReason::Replaced)));
        assert!(reasons.contains(&("p", Layer::Project, SetAsideReason::OverridesMandatory)));
        assert!(reasons.contains(&("q", Layer::Org, SetAsideReason::Replaced)));
    }

    #[test]
    fn different_ids_all_apply_most_specific_first() {
        let candidates = [
            policy("a", Layer::Company, Mode::Mandatory, None),
            policy("b", Layer::Project, Mode::Optional, None),
            policy("c", Layer::Org, Mode::Optional, None),
        ];
        let e = resolve(&candidates, &Scope::default());
        let ids: Vec<_> = e.in_force.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["b", "c", "a"]);
        assert!(e.set_aside.is_empty());
    }

    #[test]
    fn scoped_policies_apply_only_to_their_own_scope() {
        let candidates = [
            policy("alpha-only", Layer::Project, Mode::Optional, Some("alpha")),
            policy("acme-only", Layer::Company, Mode::Optional, Some("acme")),
            policy("every-team", Layer::Team, Mode::Optional, None),
        ];
        let alpha = Scope {
            company_id: Some("acme".into()),
            project_id: Some("alpha".into()),
            ..Scope::default()
        };
        let beta = Scope {
            company_id: Some("globex".into()),
            project_id: Some("beta".into()),
            ..Scope::default()
        };
        let ids = |scope: &Scope| -> Vec<String> {
            resolve(&candidates, scope)
                .in_force
                .iter()
                .map(|p| p.id.clone())
                .collect()
        };
        assert_eq!(ids(&alpha), ["alpha-only", "every-team", "acme-only"]);
        assert_eq!(ids(&beta), ["every-team"]);
        assert_eq!(
            ids(&Scope::default()),
            ["every-team"],
            "a scoped policy needs the scope to name its id"
        );
    }

    #[test]
    fn a_scoped_override_leaves_other_scopes_with_the_broader_policy() {
        let candidates = [
            policy("p", Layer::Company, Mode::Optional, None),
            policy("p", Layer::Project, Mode::Optional, Some("alpha")),
        ];
        let at = |project: &str| {
            let scope = Scope {
                project_id: Some(project.into()),
                ..Scope::default()
            };
            in_force(&resolve(&candidates, &scope))
        };
        assert_eq!(at("alpha"), [("p".to_string(), Layer::Project)]);
        assert_eq!(at("beta"), [("p".to_string(), Layer::Company)]);
    }

    #[test]
    fn duplicates_at_one_layer_keep_the_mandatory_one_else_the_first() {
        let knowledge = PolicyOrigin::Knowledge;
        let candidates = [
            policy("p", Layer::Org, Mode::Optional, None),
            policy_from("p", Layer::Org, Mode::Mandatory, None, knowledge),
            policy("q", Layer::Org, Mode::Optional, None),
            policy_from("q", Layer::Org, Mode::Optional, None, knowledge),
        ];
        let e = resolve(&candidates, &Scope::default());
        let origins: Vec<_> = e
            .in_force
            .iter()
            .map(|p| (p.id.as_str(), p.origin))
            .collect();
        assert_eq!(
            origins,
            [("p", PolicyOrigin::Knowledge), ("q", PolicyOrigin::Config)]
        );
        let aside: Vec<_> = e
            .set_aside
            .iter()
            .map(|s| (s.policy_id.as_str(), s.origin, s.reason))
            .collect();
        assert_eq!(
            aside,
            [
                ("p", PolicyOrigin::Config, SetAsideReason::Duplicate),
                ("q", knowledge, SetAsideReason::Duplicate),
            ]
        );
    }

    #[test]
    fn compile_errors_name_the_policy_and_the_rule() {
        let spec = PolicySpec {
            id: "style".into(),
            layer: Layer::Team,
            mode: Mode::Optional,
            scope_id: None,
            description: None,
            rules: vec![RuleSpec {
                id: "no-todo".into(),
                target: Target::Content,
                operator: Operator::MustNotMatch,
                value: Some("(TODO".into()),
                severity: Severity::Warn,
                message: "m".into(),
            }],
        };
        let err = CompiledPolicy::compile(spec, PolicyOrigin::Config).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("policy style: rule no-todo: invalid regex"),
            "{text}"
        );
    }
}
