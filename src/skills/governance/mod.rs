//! Governance: policies of rules, checked against writes and on request.

pub mod rules;

pub use rules::{
    EvalContext, Layer, Mode, Operator, PolicySource, PolicySpec, Report, Rule, RuleError,
    RuleSpec, Scope, Severity, SeverityCounts, Target, Validator, Violation,
};
