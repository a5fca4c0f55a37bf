//! The policies of the settings (`[[governance.policies]]`) in governance's terms.
//!
//! `config` imports nothing of the crate, so it keeps policies as plain data with enums of
//! its own; this file maps them onto the vocabulary of [`rules`](super::rules) and builds
//! every rule once, so that a policy the engine could not compile (a regex that does not
//! compile, an operator without its value) stops start-up with an error naming the key.

use super::rules::{Layer, Mode, Operator, PolicySpec, Rule, RuleSpec, Severity, Target};
use crate::config::{
    ConfigError, GovernanceSettings, PolicyLayer, PolicyMode, PolicySettings, RuleOperator,
    RuleSettings, RuleSeverity, RuleTarget,
};

/// The configured policies, each of its rules checked.
pub fn configured_policies(settings: &GovernanceSettings) -> Result<Vec<PolicySpec>, ConfigError> {
    settings
        .policies
        .iter()
        .map(|policy| {
            let spec = PolicySpec::from(policy);
            for rule in &spec.rules {
                Rule::new(rule.clone()).map_err(|e| ConfigError::Key {
                    key: "governance.policies",
                    problem: format!("policy {}: {e}", spec.id),
                })?;
            }
            Ok(spec)
        })
        .collect()
}

impl From<&PolicySettings> for PolicySpec {
    fn from(policy: &PolicySettings) -> Self {
        PolicySpec {
            id: policy.id.clone(),
            layer: policy.layer.into(),
            mode: policy.mode.into(),
            scope_id: policy.scope_id.clone(),
            description: policy.description.clone(),
            rules: policy.rules.iter().map(RuleSpec::from).collect(),
        }
    }
}

impl From<&RuleSettings> for RuleSpec {
    fn from(rule: &RuleSettings) -> Self {
        RuleSpec {
            id: rule.id.clone(),
            target: rule.target.into(),
            operator: rule.operator.into(),
            value: rule.value.clone(),
            severity: rule.severity.into(),
            message: rule.message.clone(),
        }
    }
}

impl From<PolicyLayer> for Layer {
    fn from(layer: PolicyLayer) -> Self {
        match layer {
            PolicyLayer::Project => Layer::Project,
            PolicyLayer::Team => Layer::Team,
            PolicyLayer::Org => Layer::Org,
            PolicyLayer::Company => Layer::Company,
        }
    }
}

impl From<PolicyMode> for Mode {
    fn from(mode: PolicyMode) -> Self {
        match mode {
            PolicyMode::Mandatory => Mode::Mandatory,
            PolicyMode::Optional => Mode::Optional,
        }
    }
}

impl From<RuleTarget> for Target {
    fn from(target: RuleTarget) -> Self {
        match target {
            RuleTarget::Content => Target::Content,
            RuleTarget::Path => Target::Path,
            RuleTarget::Dependency => Target::Dependency,
            RuleTarget::Tool => Target::Tool,
        }
    }
}

impl From<RuleOperator> for Operator {
    fn from(operator: RuleOperator) -> Self {
        match operator {
            RuleOperator::MustUse => Operator::MustUse,
            RuleOperator::MustNotUse => Operator::MustNotUse,
            RuleOperator::MustMatch => Operator::MustMatch,
            RuleOperator::MustNotMatch => Operator::MustNotMatch,
            RuleOperator::MustExist => Operator::MustExist,
            RuleOperator::MustNotExist => Operator::MustNotExist,
        }
    }
}

impl From<RuleSeverity> for Severity {
    fn from(severity: RuleSeverity) -> Self {
        match severity {
            RuleSeverity::Info => Severity::Info,
            RuleSeverity::Warn => Severity::Warn,
            RuleSeverity::Block => Severity::Block,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use super::*;

    /// `config.toml`'s spelling of `setting` reads as the governance value it maps to,
    /// so a policy means the same in the settings and in a knowledge item's front matter.
    fn same_word<C: Serialize + Copy, G: DeserializeOwned + PartialEq + std::fmt::Debug>(
        setting: C,
        mapped: G,
    ) {
        let word = serde_json::to_value(setting).unwrap();
        assert_eq!(
            serde_json::from_value::<G>(word.clone()).unwrap(),
            mapped,
            "{word}"
        );
    }

    #[test]
    fn every_setting_maps_to_the_governance_value_of_the_same_name() {
        use PolicyLayer as L;
        for layer in [L::Project, L::Team, L::Org, L::Company] {
            same_word(layer, Layer::from(layer));
        }
        for mode in [PolicyMode::Mandatory, PolicyMode::Optional] {
            same_word(mode, Mode::from(mode));
        }
        use RuleTarget as T;
        for target in [T::Content, T::Path, T::Dependency, T::Tool] {
            same_word(target, Target::from(target));
        }
        use RuleOperator as O;
        for operator in [
            O::MustUse,
            O::MustNotUse,
            O::MustMatch,
            O::MustNotMatch,
            O::MustExist,
            O::MustNotExist,
        ] {
            same_word(operator, Operator::from(operator));
        }
        for severity in [RuleSeverity::Info, RuleSeverity::Warn, RuleSeverity::Block] {
            same_word(severity, Severity::from(severity));
        }
        assert_eq!(Mode::from(PolicyMode::default()), Mode::default());
    }

    fn policy(operator: RuleOperator, value: Option<&str>) -> PolicySettings {
        PolicySettings {
            id: "no-openssl".into(),
            layer: PolicyLayer::Company,
            mode: PolicyMode::Mandatory,
            scope_id: Some("acme".into()),
            description: None,
            rules: vec![RuleSettings {
                id: "r1".into(),
                target: RuleTarget::Dependency,
                operator,
                value: value.map(str::to_owned),
                severity: RuleSeverity::Block,
                message: "no openssl".into(),
            }],
        }
    }

    #[test]
    fn configured_policies_keep_every_field() {
        let settings = GovernanceSettings {
            policies: vec![policy(RuleOperator::MustNotUse, Some("openssl"))],
        };
        let specs = configured_policies(&settings).unwrap();
        assert_eq!(
            specs,
            vec![PolicySpec {
                id: "no-openssl".into(),
                layer: Layer::Company,
                mode: Mode::Mandatory,
                scope_id: Some("acme".into()),
                description: None,
                rules: vec![RuleSpec {
                    id: "r1".into(),
                    target: Target::Dependency,
                    operator: Operator::MustNotUse,
                    value: Some("openssl".into()),
                    severity: Severity::Block,
                    message: "no openssl".into(),
                }],
            }]
        );
    }

    #[test]
    fn a_rule_that_cannot_be_built_names_the_key_and_the_policy() {
        for (operator, value) in [
            (RuleOperator::MustMatch, Some("(unclosed")),
            (RuleOperator::MustUse, None),
        ] {
            let settings = GovernanceSettings {
                policies: vec![policy(operator, value)],
            };
            let e = configured_policies(&settings).unwrap_err().to_string();
            assert!(
                e.contains("`governance.policies` policy no-openssl: rule r1"),
                "{e}"
            );
        }
    }
}
