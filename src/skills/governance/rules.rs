//! The vocabulary of governance, shared by the governance, knowledge and memory engines:
//! layers, rules (target, operator, severity), what a rule is checked against, the
//! violations it reports, and the [`Validator`] that memory writes and knowledge
//! proposals go through before they are stored.
//!
//! A rule reads one target of an [`EvalContext`] and holds when its operator says so;
//! a rule that does not hold is a violation at the rule's severity. Patterns are regexes
//! compiled when the rule is built ([`Rule::new`]), so an invalid pattern is refused when
//! policies load instead of silently passing every check.

use std::fmt;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The organisational layers of knowledge and governance, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    Project,
    Team,
    Org,
    Company,
}

impl Layer {
    /// Most specific first.
    pub const ALL: [Layer; 4] = [Layer::Project, Layer::Team, Layer::Org, Layer::Company];

    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Project => "project",
            Layer::Team => "team",
            Layer::Org => "org",
            Layer::Company => "company",
        }
    }

    /// 1 for the most specific layer (project) to 4 for the broadest (company).
    pub fn precedence(self) -> u8 {
        match self {
            Layer::Project => 1,
            Layer::Team => 2,
            Layer::Org => 3,
            Layer::Company => 4,
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much a violation matters. Only `Block` fails a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warn,
    Block,
}

/// What part of the checked input a rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The text being written (a memory, a knowledge item's body, a file's content).
    Content,
    /// The path of a file or knowledge item.
    Path,
    /// Declared dependencies (names).
    Dependency,
    /// Tools used.
    Tool,
}

/// How a rule judges its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    /// The target (a list) contains the value, or (a text) contains it as a substring.
    MustUse,
    MustNotUse,
    /// The target (every text of it) matches the regex.
    MustMatch,
    /// No text of the target matches the regex.
    MustNotMatch,
    /// The target is present and not empty.
    MustExist,
    MustNotExist,
}

/// A rule as written in configuration or front matter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub id: String,
    pub target: Target,
    pub operator: Operator,
    /// The value or regex; required by every operator but `must_exist`/`must_not_exist`.
    #[serde(default)]
    pub value: Option<String>,
    pub severity: Severity,
    /// Shown to whoever breaks the rule.
    pub message: String,
}

/// A rule ready to evaluate (its regex compiled).
#[derive(Debug, Clone)]
pub struct Rule {
    spec: RuleSpec,
    regex: Option<Regex>,
}

/// Why a rule could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("rule {id}: `value` is required by {operator:?}")]
    MissingValue { id: String, operator: Operator },
    #[error("rule {id}: invalid regex {pattern:?}: {reason}")]
    InvalidRegex {
        id: String,
        pattern: String,
        reason: String,
    },
    #[error("a rule needs a non-empty id")]
    EmptyId,
    /// A rule of a policy could not be built; names the policy as well as the rule.
    #[error("policy {policy_id}: {error}")]
    InPolicy {
        policy_id: String,
        error: Box<RuleError>,
    },
}

impl Rule {
    /// Checks the spec and compiles its regex.
    pub fn new(spec: RuleSpec) -> Result<Rule, RuleError> {
        if spec.id.trim().is_empty() {
            return Err(RuleError::EmptyId);
        }
        let needs_value = !matches!(spec.operator, Operator::MustExist | Operator::MustNotExist);
        if needs_value && spec.value.as_deref().is_none_or(str::is_empty) {
            return Err(RuleError::MissingValue {
                id: spec.id.clone(),
                operator: spec.operator,
            });
        }
        let regex = match spec.operator {
            Operator::MustMatch | Operator::MustNotMatch => {
                let pattern = spec.value.clone().unwrap_or_default();
                Some(Regex::new(&pattern).map_err(|e| RuleError::InvalidRegex {
                    id: spec.id.clone(),
                    pattern,
                    reason: e.to_string(),
                })?)
            }
            _ => None,
        };
        Ok(Rule { spec, regex })
    }

    pub fn spec(&self) -> &RuleSpec {
        &self.spec
    }

    /// Whether the rule holds for `ctx`.
    pub fn holds(&self, ctx: &EvalContext) -> bool {
        let texts = ctx.target(self.spec.target);
        let value = self.spec.value.as_deref().unwrap_or("");
        match self.spec.operator {
            Operator::MustExist => !texts.is_empty(),
            Operator::MustNotExist => texts.is_empty(),
            Operator::MustUse => uses(self.spec.target, &texts, value),
            Operator::MustNotUse => !uses(self.spec.target, &texts, value),
            Operator::MustMatch => {
                // Nothing to match is a failure: the rule demands something matching.
                !texts.is_empty() && texts.iter().all(|t| self.matches(t))
            }
            Operator::MustNotMatch => !texts.iter().any(|t| self.matches(t)),
        }
    }

    fn matches(&self, text: &str) -> bool {
        self.regex.as_ref().is_some_and(|r| r.is_match(text))
    }

    /// The violation this rule reports when it does not hold.
    pub fn check(&self, ctx: &EvalContext, policy_id: Option<&str>) -> Option<Violation> {
        (!self.holds(ctx)).then(|| Violation {
            rule_id: self.spec.id.clone(),
            policy_id: policy_id.map(str::to_owned),
            severity: self.spec.severity,
            target: self.spec.target,
            message: self.spec.message.clone(),
        })
    }
}

/// Lists (dependencies, tools) use exact elements; texts (content, path) substrings.
fn uses(target: Target, texts: &[&str], value: &str) -> bool {
    match target {
        Target::Dependency | Target::Tool => texts.iter().any(|t| t.eq_ignore_ascii_case(value)),
        Target::Content | Target::Path => texts.iter().any(|t| t.contains(value)),
    }
}

/// What rules are checked against. Absent parts are simply empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EvalContext {
    pub content: Option<String>,
    pub path: Option<String>,
    pub dependencies: Vec<String>,
    pub tools: Vec<String>,
}

impl EvalContext {
    /// Content only (a memory, a knowledge body).
    pub fn content(text: impl Into<String>) -> Self {
        Self {
            content: Some(text.into()),
            ..Self::default()
        }
    }

    fn target(&self, target: Target) -> Vec<&str> {
        match target {
            Target::Content => self
                .content
                .as_deref()
                .filter(|c| !c.is_empty())
                .into_iter()
                .collect(),
            Target::Path => self
                .path
                .as_deref()
                .filter(|p| !p.is_empty())
                .into_iter()
                .collect(),
            Target::Dependency => self.dependencies.iter().map(String::as_str).collect(),
            Target::Tool => self.tools.iter().map(String::as_str).collect(),
        }
    }
}

/// A rule that did not hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    pub rule_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_id: Option<String>,
    pub severity: Severity,
    pub target: Target,
    pub message: String,
}

/// The outcome of a check: it passes unless a `block` violation was found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub passed: bool,
    pub violations: Vec<Violation>,
    pub counts: SeverityCounts,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeverityCounts {
    pub info: usize,
    pub warn: usize,
    pub block: usize,
}

impl Report {
    pub fn from_violations(violations: Vec<Violation>) -> Report {
        let mut counts = SeverityCounts::default();
        for v in &violations {
            match v.severity {
                Severity::Info => counts.info += 1,
                Severity::Warn => counts.warn += 1,
                Severity::Block => counts.block += 1,
            }
        }
        Report {
            passed: counts.block == 0,
            violations,
            counts,
        }
    }
}

/// The JSON Schema of a serialised [`Report`] (the output of every check tool).
pub fn report_schema() -> serde_json::Value {
    use crate::skills::output::{array_of, object, of};
    object(
        &["passed", "violations", "counts"],
        serde_json::json!({
            "passed": of("boolean"),
            "violations": array_of(object(
                &["ruleId", "severity", "target", "message"],
                serde_json::json!({"ruleId": of("string"), "policyId": of("string"),
                                   "severity": of("string"), "target": of("string"), "message": of("string")}),
            )),
            "counts": object(
                &["info", "warn", "block"],
                serde_json::json!({"info": of("integer"), "warn": of("integer"), "block": of("integer")}),
            ),
        }),
    )
}

/// Where a write happens, for choosing the policies that apply to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Scope {
    pub company_id: Option<String>,
    pub org_id: Option<String>,
    pub team_id: Option<String>,
    pub project_id: Option<String>,
}

impl Scope {
    /// The id of the company, org, team or project (as `layer` says) the scope is in.
    pub fn id_for(&self, layer: Layer) -> Option<&str> {
        match layer {
            Layer::Company => self.company_id.as_deref(),
            Layer::Org => self.org_id.as_deref(),
            Layer::Team => self.team_id.as_deref(),
            Layer::Project => self.project_id.as_deref(),
        }
    }
}

/// Whether a lower layer may override a policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Applies below its layer whatever lower layers say.
    Mandatory,
    /// A policy with the same id at a more specific layer replaces it.
    #[default]
    Optional,
}

/// A policy as written in `config.toml` (`[[governance.policies]]`) or derived from an
/// accepted knowledge item of type `policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    pub id: String,
    pub layer: Layer,
    #[serde(default)]
    pub mode: Mode,
    /// The company, org, team or project (matching `layer`) it applies to; `None`: every
    /// one of that layer.
    #[serde(default)]
    pub scope_id: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub rules: Vec<RuleSpec>,
}

impl PolicySpec {
    /// Whether the policy is meant for `scope`: it names no particular company, org, team
    /// or project of its layer, or it names the one the scope is in.
    pub fn applies_at(&self, scope: &Scope) -> bool {
        applies_at(self.layer, self.scope_id.as_deref(), scope)
    }
}

/// A policy of `layer` limited to `scope_id` (when given) applies at `scope`.
pub(crate) fn applies_at(layer: Layer, scope_id: Option<&str>, scope: &Scope) -> bool {
    scope_id.is_none_or(|id| scope.id_for(layer) == Some(id))
}

/// Policies that live outside the configuration (accepted knowledge items of type
/// `policy`). Implemented by the knowledge engine.
pub trait PolicySource: Send + Sync + 'static {
    fn policies(&self, tenant: &str) -> Vec<PolicySpec>;
}

/// Checks writes before they are stored (memory writes, knowledge proposals). Implemented
/// by the governance engine.
pub trait Validator: Send + Sync + 'static {
    /// The report for `ctx` under the policies in force for `tenant` at `scope`.
    fn validate(&self, tenant: &str, scope: &Scope, ctx: &EvalContext) -> Report;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(target: Target, operator: Operator, value: Option<&str>) -> Rule {
        Rule::new(RuleSpec {
            id: "r1".into(),
            target,
            operator,
            value: value.map(str::to_owned),
            severity: Severity::Block,
            message: "m".into(),
        })
        .unwrap()
    }

    fn deps(names: &[&str]) -> EvalContext {
        EvalContext {
            dependencies: names.iter().map(|s| s.to_string()).collect(),
            ..EvalContext::default()
        }
    }

    #[test]
    fn every_operator() {
        let text = EvalContext::content("uses unsafe code");
        let empty = EvalContext::default();
        let r = |op, v| rule(Target::Content, op, v);
        assert!(r(Operator::MustUse, Some("unsafe")).holds(&text));
        assert!(!r(Operator::MustUse, Some("tokio")).holds(&text));
        assert!(!r(Operator::MustNotUse, Some("unsafe")).holds(&text));
        assert!(r(Operator::MustNotUse, Some("unsafe")).holds(&empty));
        assert!(r(Operator::MustMatch, Some(r"^uses \w+")).holds(&text));
        assert!(!r(Operator::MustMatch, Some(r"^uses \w+")).holds(&empty));
        assert!(!r(Operator::MustNotMatch, Some("un(safe)")).holds(&text));
        assert!(r(Operator::MustNotMatch, Some("un(safe)")).holds(&empty));
        assert!(r(Operator::MustExist, None).holds(&text));
        assert!(!r(Operator::MustExist, None).holds(&empty));
        assert!(r(Operator::MustNotExist, None).holds(&empty));
        assert!(!r(Operator::MustNotExist, None).holds(&text));
    }

    #[test]
    fn lists_match_whole_elements() {
        let r = rule(Target::Dependency, Operator::MustNotUse, Some("openssl"));
        assert!(!r.holds(&deps(&["tokio", "OpenSSL"])));
        assert!(
            r.holds(&deps(&["openssl-probe"])),
            "a prefix is another dependency"
        );
    }

    #[test]
    fn invalid_rules_are_refused_when_built() {
        let spec = |operator, value: Option<&str>| RuleSpec {
            id: "bad".into(),
            target: Target::Content,
            operator,
            value: value.map(str::to_owned),
            severity: Severity::Warn,
            message: "m".into(),
        };
        assert!(matches!(
            Rule::new(spec(Operator::MustMatch, Some("(unclosed"))),
            Err(RuleError::InvalidRegex { .. })
        ));
        assert!(matches!(
            Rule::new(spec(Operator::MustUse, None)),
            Err(RuleError::MissingValue { .. })
        ));
        assert!(Rule::new(spec(Operator::MustExist, None)).is_ok());
    }

    #[test]
    fn only_block_fails_a_report() {
        let v = |severity| Violation {
            rule_id: "r".into(),
            policy_id: None,
            severity,
            target: Target::Content,
            message: "m".into(),
        };
        let warn = Report::from_violations(vec![v(Severity::Info), v(Severity::Warn)]);
        assert!(warn.passed);
        assert_eq!((warn.counts.info, warn.counts.warn), (1, 1));
        assert!(!Report::from_violations(vec![v(Severity::Block)]).passed);
    }
}
