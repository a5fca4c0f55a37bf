//! Governance: policies of rules, checked against writes and on request.
//!
//! `rules` is the shared vocabulary (layers, rules, reports, the [`Validator`] and
//! [`PolicySource`] seams); `configured` reads the settings' policies into it;
//! `effective` decides which policies are in force at a scope; `engine` evaluates them;
//! `skill` exposes the engine as the `governance` skill.

pub mod configured;
pub mod effective;
pub mod engine;
pub mod rules;
pub mod skill;

pub use configured::configured_policies;
pub use effective::{
    CompiledPolicy, EffectivePolicies, InvalidPolicy, PolicyOrigin, SetAsidePolicy, SetAsideReason,
};
pub use engine::{ActiveConstraint, GovernanceEngine};
pub use rules::{
    EvalContext, Layer, Mode, Operator, PolicySource, PolicySpec, Report, Rule, RuleError,
    RuleSpec, Scope, Severity, SeverityCounts, Target, Validator, Violation, report_schema,
};
pub use skill::GovernanceSkill;
