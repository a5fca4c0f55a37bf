//! Thread state: a bounded key/value map whose entries expire (contract B.6, A.2).
//!
//! Values are typed JSON and stay what they were written as: the string `"42"` reads back
//! as a string, not a number (the original stored everything as text and re-parsed it).
//! Each entry carries its own expiry; expired entries read as absent and are removed by
//! [`ThreadState::remove_expired`] (the janitor counts them). The serialised map is bounded:
//! a write that would take it past `max_bytes` fails and leaves the state as it was.
//! Stored form (the thread's `conversation_context`): `{"key": {"value": …, "expiresAt": ms}}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::StateSettings;
use crate::domain::Timestamp;

/// Why a state write or load failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The write would take the serialised state past its limit; nothing was changed.
    #[error("thread state would grow to {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    /// The stored `conversation_context` is not a JSON object.
    #[error("stored thread state is not a JSON object")]
    NotAnObject,
}

/// One value and when it stops existing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    value: Value,
    expires_at: Timestamp,
}

/// A thread's state map.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadState {
    entries: BTreeMap<String, Entry>,
    ttl_ms: i64,
    max_bytes: usize,
}

impl ThreadState {
    /// An empty state with the configured entry TTL and size limit.
    pub fn new(settings: &StateSettings) -> Self {
        Self {
            entries: BTreeMap::new(),
            ttl_ms: i64::try_from(settings.ttl_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
            max_bytes: settings.max_bytes,
        }
    }

    /// Sets `key`, expiring one TTL after `now`. Fails without changing anything when the
    /// serialised state (live entries) would exceed the limit.
    pub fn set(
        &mut self,
        key: impl Into<String>,
        value: Value,
        now: Timestamp,
    ) -> Result<(), StateError> {
        self.apply([(key.into(), value)], now)
    }

    /// Sets every key of `delta` (an event's state delta) at once: all or nothing.
    pub fn apply_delta(
        &mut self,
        delta: &Map<String, Value>,
        now: Timestamp,
    ) -> Result<(), StateError> {
        self.apply(delta.iter().map(|(k, v)| (k.clone(), v.clone())), now)
    }

    fn apply(
        &mut self,
        writes: impl IntoIterator<Item = (String, Value)>,
        now: Timestamp,
    ) -> Result<(), StateError> {
        let expires_at = Timestamp(now.0.saturating_add(self.ttl_ms));
        let mut candidate = self.entries.clone();
        for (key, value) in writes {
            candidate.insert(key, Entry { value, expires_at });
        }
        // Expired entries are dead weight that the janitor has not collected yet; they must
        // not make a live write fail.
        let size = serialized_len(candidate.iter().filter(|(_, e)| e.expires_at > now));
        if size > self.max_bytes {
            return Err(StateError::TooLarge {
                size,
                limit: self.max_bytes,
            });
        }
        self.entries = candidate;
        Ok(())
    }

    /// The value of `key`, unless absent or expired.
    pub fn get(&self, key: &str, now: Timestamp) -> Option<&Value> {
        self.entries
            .get(key)
            .filter(|e| e.expires_at > now)
            .map(|e| &e.value)
    }

    /// Removes `key`, returning its value if it was live.
    pub fn remove(&mut self, key: &str, now: Timestamp) -> Option<Value> {
        self.entries
            .remove(key)
            .filter(|e| e.expires_at > now)
            .map(|e| e.value)
    }

    /// The live entries, by key.
    pub fn iter(&self, now: Timestamp) -> impl Iterator<Item = (&str, &Value)> {
        self.entries
            .iter()
            .filter(move |(_, e)| e.expires_at > now)
            .map(|(k, e)| (k.as_str(), &e.value))
    }

    /// Drops expired entries; returns how many.
    pub fn remove_expired(&mut self, now: Timestamp) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| e.expires_at > now);
        before - self.entries.len()
    }

    /// How many entries are stored (expired ones not yet removed included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The stored form: `{"key": {"value": …, "expiresAt": ms}}`.
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.entries
                .iter()
                .map(|(k, e)| (k.clone(), entry_json(e)))
                .collect(),
        )
    }

    /// Loads the stored form. An entry not in that form (state written by something else)
    /// is taken as a plain value with a fresh TTL rather than lost.
    pub fn from_json(
        stored: &Value,
        settings: &StateSettings,
        now: Timestamp,
    ) -> Result<Self, StateError> {
        let Value::Object(map) = stored else {
            return Err(StateError::NotAnObject);
        };
        let mut state = Self::new(settings);
        let fresh = Timestamp(now.0.saturating_add(state.ttl_ms));
        for (key, raw) in map {
            let entry = serde_json::from_value::<Entry>(raw.clone()).unwrap_or_else(|_| Entry {
                value: raw.clone(),
                expires_at: fresh,
            });
            state.entries.insert(key.clone(), entry);
        }
        Ok(state)
    }
}

fn entry_json(entry: &Entry) -> Value {
    serde_json::json!({"value": entry.value, "expiresAt": entry.expires_at})
}

/// The byte length of the stored form of `entries`.
fn serialized_len<'a>(entries: impl Iterator<Item = (&'a String, &'a Entry)>) -> usize {
    let object: Map<String, Value> = entries.map(|(k, e)| (k.clone(), entry_json(e))).collect();
    Value::Object(object).to_string().len()
}

#[cfg(test)]
mod tests {
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
        let reloaded =
            ThreadState::from_json(&s.to_json(), &StateSettings::default(), NOW).unwrap();
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
}
