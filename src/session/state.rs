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
#[path = "state_tests.rs"]
mod tests;
