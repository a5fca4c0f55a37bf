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
