//! Origins §2 `TestStateAdapter*` scenarios, seed 002's state TTL and size limit, and the
//! typed-value fix (origins §5 Lango 9).

use serde_json::{Map, json};

use super::*;

const NOW: Timestamp = Timestamp(1_000_000);

fn settings(ttl_secs: u64, max_bytes: usize) -> StateSettings {
    StateSettings {
        ttl_secs,
        max_bytes,
    }
}

fn state() -> ThreadState {
    ThreadState::new(&StateSettings::default())
}

#[test]
fn state_adapter_set_get() {
    let mut s = state();
    s.set("name", json!("lango"), NOW).unwrap();
    s.set("obj", json!({"a": 1}), NOW).unwrap();
    assert_eq!(s.get("name", NOW), Some(&json!("lango")));
    assert_eq!(s.get("obj", NOW).and_then(|v| v.get("a")), Some(&json!(1)));
}

#[test]
fn state_values_keep_their_type() {
    let mut s = state();
    s.set("n", json!("42"), NOW).unwrap();
    s.set("b", json!("true"), NOW).unwrap();
    let reloaded = ThreadState::from_json(&s.to_json(), &StateSettings::default(), NOW).unwrap();
    assert_eq!(reloaded.get("n", NOW), Some(&json!("42")));
    assert_eq!(reloaded.get("b", NOW), Some(&json!("true")));
}

#[test]
fn state_adapter_get_non_existent() {
    assert_eq!(state().get("missing", NOW), None);
}

#[test]
fn state_adapter_all() {
    let mut s = state();
    s.set("a", json!(1), NOW).unwrap();
    s.set("b", json!(2), NOW).unwrap();
    let keys: Vec<_> = s.iter(NOW).map(|(k, _)| k.to_owned()).collect();
    assert_eq!(keys, ["a", "b"]);
}

#[test]
fn state_entries_expire_after_their_ttl() {
    let mut s = ThreadState::new(&settings(60, 1024));
    s.set("short", json!(1), NOW).unwrap();
    s.set("later", json!(2), Timestamp(NOW.0 + 30_000)).unwrap();
    let after_first = Timestamp(NOW.0 + 60_000);
    assert_eq!(s.get("short", after_first), None);
    assert_eq!(s.get("later", after_first), Some(&json!(2)));
    assert_eq!(s.iter(after_first).count(), 1);
    assert_eq!(s.remove_expired(after_first), 1);
    assert_eq!(s.len(), 1);
    assert_eq!(s.remove_expired(after_first), 0);
}

#[test]
fn state_write_past_the_limit_fails_and_keeps_the_old_state() {
    let mut s = ThreadState::new(&settings(3600, 100));
    s.set("a", json!("small"), NOW).unwrap();
    let before = s.clone();
    let err = s.set("b", json!("x".repeat(200)), NOW).unwrap_err();
    match err {
        StateError::TooLarge { size, limit } => {
            assert_eq!(limit, 100);
            assert!(size > 200);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("over the limit of 100 bytes"));
    assert_eq!(s, before);
}

#[test]
fn state_expired_entries_do_not_count_against_the_limit() {
    let mut s = ThreadState::new(&settings(1, 120));
    s.set("old", json!("x".repeat(60)), NOW).unwrap();
    let later = Timestamp(NOW.0 + 2_000);
    s.set("new", json!("y".repeat(60)), later).unwrap();
    assert_eq!(s.get("new", later), Some(&json!("y".repeat(60))));
}

#[test]
fn state_apply_delta_is_all_or_nothing() {
    let mut s = ThreadState::new(&settings(3600, 100));
    let mut delta = Map::new();
    delta.insert("step".into(), json!(2));
    s.apply_delta(&delta, NOW).unwrap();
    assert_eq!(s.get("step", NOW), Some(&json!(2)));
    delta.insert("step".into(), json!(3));
    delta.insert("blob".into(), json!("z".repeat(500)));
    assert!(s.apply_delta(&delta, NOW).is_err());
    assert_eq!(s.get("step", NOW), Some(&json!(2)));
    assert_eq!(s.get("blob", NOW), None);
}

#[test]
fn state_to_json_and_back() {
    let mut s = ThreadState::new(&settings(60, 4096));
    s.set("k", json!({"nested": [1, 2]}), NOW).unwrap();
    let stored = s.to_json();
    assert_eq!(
        stored,
        json!({"k": {"value": {"nested": [1, 2]}, "expiresAt": NOW.0 + 60_000}})
    );
    let back = ThreadState::from_json(&stored, &settings(60, 4096), NOW).unwrap();
    assert_eq!(back, s);
}

#[test]
fn state_from_json_keeps_foreign_entries_and_refuses_non_objects() {
    let foreign = json!({"topic": "tests", "turns": 1});
    let s = ThreadState::from_json(&foreign, &StateSettings::default(), NOW).unwrap();
    assert_eq!(s.get("topic", NOW), Some(&json!("tests")));
    assert_eq!(s.get("turns", NOW), Some(&json!(1)));
    assert_eq!(
        ThreadState::from_json(&json!([1]), &StateSettings::default(), NOW),
        Err(StateError::NotAnObject)
    );
}

#[test]
fn state_remove() {
    let mut s = state();
    s.set("k", json!(true), NOW).unwrap();
    assert_eq!(s.remove("k", NOW), Some(json!(true)));
    assert!(s.is_empty());
}
