//! Task state and role names in each dialect, and the one liberal parser for both.
//!
//! Output is strict per dialect (1.0 says `TASK_STATE_CANCELED`, 0.3 REST says
//! `TASK_STATE_CANCELLED`, 0.3 JSON-RPC says `canceled`, 0.1 knows no `rejected`).
//! Input accepts every spelling any dialect uses, plus the proto enum numbers, because
//! a client that sends a sibling dialect's name means the same state.

use serde_json::Value;

use super::Dialect;
use super::fields::invalid;
use crate::domain::{Role, TaskState};
use crate::error::Error;

/// The wire name of a state in `d`.
pub(crate) fn state_name(d: Dialect, state: TaskState) -> &'static str {
    match d {
        Dialect::V1 => proto_state_name(state, "TASK_STATE_CANCELED"),
        Dialect::V03Rest => proto_state_name(state, "TASK_STATE_CANCELLED"),
        Dialect::V03Rpc => match state {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::AuthRequired => "auth-required",
            TaskState::Completed => "completed",
            TaskState::Canceled => "canceled",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
        },
        // 0.1 predates `rejected` and `auth-required`; its catch-all is `unknown`.
        Dialect::V01 => match state {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::Completed => "completed",
            TaskState::Canceled => "canceled",
            TaskState::Failed => "failed",
            TaskState::AuthRequired | TaskState::Rejected => "unknown",
        },
    }
}

fn proto_state_name(state: TaskState, canceled: &'static str) -> &'static str {
    match state {
        TaskState::Submitted => "TASK_STATE_SUBMITTED",
        TaskState::Working => "TASK_STATE_WORKING",
        TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
        TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        TaskState::Completed => "TASK_STATE_COMPLETED",
        TaskState::Canceled => canceled,
        TaskState::Failed => "TASK_STATE_FAILED",
        TaskState::Rejected => "TASK_STATE_REJECTED",
    }
}

/// The wire name of a role in `d`.
pub(crate) fn role_name(d: Dialect, role: Role) -> &'static str {
    match (d, role) {
        (Dialect::V1 | Dialect::V03Rest, Role::User) => "ROLE_USER",
        (Dialect::V1 | Dialect::V03Rest, Role::Agent) => "ROLE_AGENT",
        (Dialect::V03Rpc | Dialect::V01, Role::User) => "user",
        (Dialect::V03Rpc | Dialect::V01, Role::Agent) => "agent",
    }
}

/// An enum value as the client gave it: a normalised name or a number.
enum Raw {
    /// Upper case, `-` as `_`, without the type prefix: `"ROLE_USER"` -> `"USER"`,
    /// `"input-required"` -> `"INPUT_REQUIRED"`.
    Name(String),
    Number(i64),
}

fn read_raw(value: &Value, prefix: &str) -> Option<Raw> {
    match value {
        Value::Number(n) => n.as_i64().map(Raw::Number),
        Value::String(s) => {
            let s = s.trim();
            if let Ok(n) = s.parse::<i64>() {
                return Some(Raw::Number(n));
            }
            let upper = s.to_ascii_uppercase().replace('-', "_");
            let bare = upper.strip_prefix(prefix).unwrap_or(&upper).to_owned();
            Some(Raw::Name(bare))
        }
        _ => None,
    }
}

/// Parses a task state in any dialect's spelling or as its proto number (1..=8).
/// `TASK_STATE_UNSPECIFIED` / `0` / `unknown` are refused: they name no state.
pub(crate) fn parse_state(value: &Value, path: &str) -> Result<TaskState, Error> {
    let state = match read_raw(value, "TASK_STATE_") {
        Some(Raw::Number(n)) => match n {
            1 => Some(TaskState::Submitted),
            2 => Some(TaskState::Working),
            3 => Some(TaskState::Completed),
            4 => Some(TaskState::Failed),
            5 => Some(TaskState::Canceled),
            6 => Some(TaskState::InputRequired),
            7 => Some(TaskState::Rejected),
            8 => Some(TaskState::AuthRequired),
            _ => None,
        },
        Some(Raw::Name(name)) => match name.as_str() {
            "SUBMITTED" => Some(TaskState::Submitted),
            "WORKING" => Some(TaskState::Working),
            "COMPLETED" => Some(TaskState::Completed),
            "FAILED" => Some(TaskState::Failed),
            "CANCELED" | "CANCELLED" => Some(TaskState::Canceled),
            "INPUT_REQUIRED" => Some(TaskState::InputRequired),
            "REJECTED" => Some(TaskState::Rejected),
            "AUTH_REQUIRED" => Some(TaskState::AuthRequired),
            _ => None,
        },
        None => None,
    };
    state.ok_or_else(|| invalid(path, format!("{value} is not a task state")))
}

/// Parses a role in any dialect's spelling or as its proto number (1 user, 2 agent).
pub(crate) fn parse_role(value: &Value, path: &str) -> Result<Role, Error> {
    let role = match read_raw(value, "ROLE_") {
        Some(Raw::Number(1)) => Some(Role::User),
        Some(Raw::Number(2)) => Some(Role::Agent),
        Some(Raw::Name(name)) if name == "USER" => Some(Role::User),
        Some(Raw::Name(name)) if name == "AGENT" => Some(Role::Agent),
        _ => None,
    };
    role.ok_or_else(|| invalid(path, format!("{value} is not a role")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const DIALECTS: [Dialect; 4] = [Dialect::V1, Dialect::V03Rpc, Dialect::V03Rest, Dialect::V01];

    #[test]
    fn every_emitted_state_name_parses_back() {
        for d in DIALECTS {
            for s in TaskState::ALL {
                let name = state_name(d, s);
                if name == "unknown" {
                    continue;
                }
                assert_eq!(
                    parse_state(&json!(name), "status").unwrap(),
                    s,
                    "{d:?} {name}"
                );
            }
        }
    }

    #[test]
    fn canceled_is_spelled_cancelled_only_in_0_3_rest() {
        assert_eq!(
            state_name(Dialect::V03Rest, TaskState::Canceled),
            "TASK_STATE_CANCELLED"
        );
        assert_eq!(
            state_name(Dialect::V1, TaskState::Canceled),
            "TASK_STATE_CANCELED"
        );
        assert_eq!(state_name(Dialect::V03Rpc, TaskState::Canceled), "canceled");
    }

    #[test]
    fn states_parse_from_proto_numbers_as_numbers_or_strings() {
        let expected = [
            (1, TaskState::Submitted),
            (2, TaskState::Working),
            (3, TaskState::Completed),
            (4, TaskState::Failed),
            (5, TaskState::Canceled),
            (6, TaskState::InputRequired),
            (7, TaskState::Rejected),
            (8, TaskState::AuthRequired),
        ];
        for (n, s) in expected {
            assert_eq!(parse_state(&json!(n), "status").unwrap(), s);
            assert_eq!(parse_state(&json!(n.to_string()), "status").unwrap(), s);
        }
    }

    #[test]
    fn unspecified_and_unknown_states_are_refused_naming_the_field() {
        for bad in [
            json!(0),
            json!("TASK_STATE_UNSPECIFIED"),
            json!("unknown"),
            json!(9),
        ] {
            let err = parse_state(&bad, "status").unwrap_err();
            let Error::InvalidParams(text) = err else {
                panic!("{bad}: not invalid params")
            };
            assert!(text.starts_with("status: "), "{text}");
        }
    }

    #[test]
    fn roles_parse_in_every_spelling() {
        for user in [json!("ROLE_USER"), json!("user"), json!(1), json!("1")] {
            assert_eq!(parse_role(&user, "role").unwrap(), Role::User, "{user}");
        }
        for agent in [json!("ROLE_AGENT"), json!("agent"), json!(2)] {
            assert_eq!(parse_role(&agent, "role").unwrap(), Role::Agent, "{agent}");
        }
        assert!(parse_role(&json!("ROLE_UNSPECIFIED"), "role").is_err());
        assert!(parse_role(&json!(0), "role").is_err());
    }

    #[test]
    fn zero_point_one_maps_states_it_lacks_to_unknown() {
        assert_eq!(state_name(Dialect::V01, TaskState::Rejected), "unknown");
        assert_eq!(state_name(Dialect::V01, TaskState::AuthRequired), "unknown");
        assert_eq!(
            state_name(Dialect::V01, TaskState::InputRequired),
            "input-required"
        );
    }
}
