//! The lifecycle of a knowledge item, enforced on every status change.
//!
//! ```text
//! draft ──► proposed ──► accepted ──► deprecated
//!   │           │            └──────► superseded (by another accepted item)
//!   └──► rejected ◄┘
//! ```
//!
//! The original repository's `update_status` overwrote the status with anything; here a
//! change not on this graph is refused with both states named, a new item starts as
//! `draft` or `proposed`, and only items that never took effect may be deleted (an
//! accepted item is deprecated instead, so its history stays meaningful).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where an item is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Draft,
    Proposed,
    Accepted,
    Rejected,
    Deprecated,
    Superseded,
}

impl Status {
    /// Every status, in lifecycle order (for schemas and messages).
    pub const ALL: [Status; 6] = [
        Status::Draft,
        Status::Proposed,
        Status::Accepted,
        Status::Rejected,
        Status::Deprecated,
        Status::Superseded,
    ];

    /// The wire and file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Draft => "draft",
            Status::Proposed => "proposed",
            Status::Accepted => "accepted",
            Status::Rejected => "rejected",
            Status::Deprecated => "deprecated",
            Status::Superseded => "superseded",
        }
    }

    /// The statuses this one may change to.
    pub fn successors(self) -> &'static [Status] {
        match self {
            Status::Draft => &[Status::Proposed, Status::Rejected],
            Status::Proposed => &[Status::Accepted, Status::Rejected],
            Status::Accepted => &[Status::Deprecated, Status::Superseded],
            Status::Rejected | Status::Deprecated | Status::Superseded => &[],
        }
    }

    /// Whether a new item may start in this status.
    pub fn is_initial(self) -> bool {
        matches!(self, Status::Draft | Status::Proposed)
    }

    /// Whether an item in this status may be deleted: only one that never took effect.
    pub fn is_deletable(self) -> bool {
        matches!(self, Status::Draft | Status::Proposed | Status::Rejected)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lifecycle rule that a request broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("cannot change status from {from} to {to} ({})", allowed(*from))]
    NotAllowed { from: Status, to: Status },
    #[error("a new item starts as draft or proposed, not {0}")]
    InitialStatus(Status),
    #[error(
        "an item that is {0} cannot be deleted (only draft, proposed or rejected ones; deprecate an accepted item instead)"
    )]
    NotDeletable(Status),
    #[error("status superseded needs `supersededBy`, the id of the accepted item replacing it")]
    MissingSuccessor,
    #[error("`supersededBy` is only allowed with status superseded")]
    UnexpectedSuccessor,
}

fn allowed(from: Status) -> String {
    let next = from.successors();
    if next.is_empty() {
        return format!("{from} is final");
    }
    let names: Vec<&str> = next.iter().map(|s| s.as_str()).collect();
    format!("from {from} only {} are allowed", names.join(" or "))
}

/// Checks a status change, including that `supersededBy` is given exactly when the new
/// status is `superseded` (whether it names an accepted item is the engine's check).
pub fn check_transition(
    from: Status,
    to: Status,
    has_successor: bool,
) -> Result<(), TransitionError> {
    if !from.successors().contains(&to) {
        return Err(TransitionError::NotAllowed { from, to });
    }
    match (to, has_successor) {
        (Status::Superseded, false) => Err(TransitionError::MissingSuccessor),
        (Status::Superseded, true) | (_, false) => Ok(()),
        (_, true) => Err(TransitionError::UnexpectedSuccessor),
    }
}

/// Checks the status a new item starts in.
pub fn check_initial(status: Status) -> Result<(), TransitionError> {
    if status.is_initial() {
        Ok(())
    } else {
        Err(TransitionError::InitialStatus(status))
    }
}

/// Checks that an item in `status` may be deleted.
pub fn check_deletable(status: Status) -> Result<(), TransitionError> {
    if status.is_deletable() {
        Ok(())
    } else {
        Err(TransitionError::NotDeletable(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    #[test]
    fn exactly_the_documented_transitions_are_allowed() {
        let allowed = [
            (Draft, Proposed),
            (Draft, Rejected),
            (Proposed, Accepted),
            (Proposed, Rejected),
            (Accepted, Deprecated),
            (Accepted, Superseded),
        ];
        for from in Status::ALL {
            for to in Status::ALL {
                let successor = to == Superseded;
                let result = check_transition(from, to, successor);
                if allowed.contains(&(from, to)) {
                    assert_eq!(result, Ok(()), "{from} -> {to}");
                } else {
                    assert_eq!(
                        result,
                        Err(TransitionError::NotAllowed { from, to }),
                        "{from} -> {to}"
                    );
                }
            }
        }
    }

    #[test]
    fn refusals_name_both_states() {
        let text = check_transition(Draft, Accepted, false)
            .unwrap_err()
            .to_string();
        assert!(text.contains("from draft to accepted"), "{text}");
        assert!(text.contains("proposed or rejected"), "{text}");
        let text = check_transition(Rejected, Draft, false)
            .unwrap_err()
            .to_string();
        assert!(text.contains("rejected is final"), "{text}");
    }

    #[test]
    fn superseded_goes_with_a_successor_and_nothing_else_does() {
        assert_eq!(
            check_transition(Accepted, Superseded, false),
            Err(TransitionError::MissingSuccessor)
        );
        assert_eq!(
            check_transition(Accepted, Deprecated, true),
            Err(TransitionError::UnexpectedSuccessor)
        );
    }

    #[test]
    fn new_items_start_early_and_only_unaccepted_items_are_deleted() {
        assert!(check_initial(Draft).is_ok() && check_initial(Proposed).is_ok());
        for s in [Accepted, Rejected, Deprecated, Superseded] {
            assert_eq!(check_initial(s), Err(TransitionError::InitialStatus(s)));
        }
        for s in [Draft, Proposed, Rejected] {
            assert!(check_deletable(s).is_ok());
        }
        for s in [Accepted, Deprecated, Superseded] {
            assert_eq!(check_deletable(s), Err(TransitionError::NotDeletable(s)));
        }
    }
}
