//! Scoring and ordering search hits.
//!
//! Without embeddings a hit's score is its full-text score. With embeddings it is
//! `0.5·text + 0.5·cosine` over the union of the full-text candidates and the scanned
//! embedded memories, where a memory missing from one side scores 0 there and negative
//! similarity counts as none, so every score stays in [0, 1]. Hits are ranked by layer
//! precedence (most specific first), then score, then recency, then id — a total order,
//! so equal inputs always give equal pages. No comparison here can panic: non-finite
//! numbers become 0 and floats are compared with `total_cmp`.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::store::memories::{MemoryRecord, ScoredMemory};

/// Weight of the full-text score when embeddings are in use.
pub const TEXT_WEIGHT: f64 = 0.5;
/// Weight of the cosine similarity when embeddings are in use.
pub const EMBEDDING_WEIGHT: f64 = 0.5;

/// Cosine similarity in [-1, 1]; 0 when it is undefined (different or zero lengths, a
/// zero vector) or not a finite number.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut norm_a, mut norm_b) = (0.0_f64, 0.0_f64, 0.0_f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        norm_a += x * x;
        norm_b += y * y;
    }
    let similarity = dot / (norm_a.sqrt() * norm_b.sqrt());
    if similarity.is_finite() {
        similarity.clamp(-1.0, 1.0)
    } else {
        0.0
    }
}

/// Blends full-text candidates and scanned memories into scored hits (one per memory).
pub fn blend(
    text: Vec<ScoredMemory>,
    scanned: Vec<MemoryRecord>,
    query: &[f32],
) -> Vec<ScoredMemory> {
    let mut by_id: HashMap<String, (MemoryRecord, f64)> = HashMap::new();
    for hit in text {
        by_id.insert(
            hit.memory.id.clone(),
            (hit.memory, finite_or_zero(hit.score)),
        );
    }
    for memory in scanned {
        by_id.entry(memory.id.clone()).or_insert((memory, 0.0));
    }
    by_id
        .into_values()
        .map(|(memory, text_score)| {
            let similarity = memory
                .embedding
                .as_deref()
                .map_or(0.0, |e| cosine(query, e).max(0.0));
            ScoredMemory {
                score: TEXT_WEIGHT * text_score + EMBEDDING_WEIGHT * similarity,
                memory,
            }
        })
        .collect()
}

fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// The ranking order: layer precedence, score (higher first), updated (newer first), id.
pub fn compare(a: &ScoredMemory, b: &ScoredMemory) -> Ordering {
    a.memory
        .scope
        .layer()
        .precedence()
        .cmp(&b.memory.scope.layer().precedence())
        .then_with(|| b.score.total_cmp(&a.score))
        .then_with(|| b.memory.updated_at.cmp(&a.memory.updated_at))
        .then_with(|| b.memory.id.cmp(&a.memory.id))
}

/// Sorts hits into the ranking order.
pub fn rank(hits: &mut [ScoredMemory]) {
    hits.sort_by(compare);
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;
    use crate::domain::{TenantId, Timestamp};
    use crate::store::memories::{MemoryLayer, MemoryScope, ScopeField, ScopeIds};

    fn record(
        id: &str,
        layer: MemoryLayer,
        updated: i64,
        embedding: Option<Vec<f32>>,
    ) -> MemoryRecord {
        let ids = ScopeField::ALL
            .into_iter()
            .fold(ScopeIds::new(), |ids, f| ids.with(f, "x"));
        MemoryRecord {
            id: id.into(),
            tenant: TenantId::parse("t").unwrap(),
            scope: MemoryScope::new(layer, &ids).unwrap(),
            content: id.into(),
            content_hash: String::new(),
            tags: Vec::new(),
            metadata: Map::new(),
            importance: 0.5,
            embedding,
            created_at: Timestamp(0),
            updated_at: Timestamp(updated),
        }
    }

    fn hit(id: &str, layer: MemoryLayer, score: f64, updated: i64) -> ScoredMemory {
        ScoredMemory {
            memory: record(id, layer, updated, None),
            score,
        }
    }

    #[test]
    fn cosine_is_defined_or_zero() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-12);
        assert!((cosine(&[1.0, 0.0], &[-1.0, 0.0]) + 1.0).abs() < 1e-12);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0, "dimensions differ");
        assert_eq!(cosine(&[], &[]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0, "zero vector");
        assert_eq!(cosine(&[f32::NAN, 1.0], &[1.0, 1.0]), 0.0);
        assert_eq!(cosine(&[f32::INFINITY, 1.0], &[1.0, 1.0]), 0.0);
        assert_eq!(cosine(&[f32::MAX, f32::MAX], &[f32::MAX, f32::MAX]), 1.0);
    }

    #[test]
    fn blending_weighs_text_and_similarity_equally() {
        let text = vec![ScoredMemory {
            memory: record("both", MemoryLayer::User, 0, Some(vec![1.0, 0.0])),
            score: 0.6,
        }];
        let scanned = vec![
            record("both", MemoryLayer::User, 0, Some(vec![1.0, 0.0])),
            record("vector-only", MemoryLayer::User, 0, Some(vec![1.0, 1.0])),
            record("opposite", MemoryLayer::User, 0, Some(vec![-1.0, 0.0])),
        ];
        let mut hits = blend(text, scanned, &[1.0, 0.0]);
        rank(&mut hits);
        let scores: Vec<(&str, f64)> = hits
            .iter()
            .map(|h| (h.memory.id.as_str(), h.score))
            .collect();
        assert_eq!(scores[0], ("both", 0.8));
        assert_eq!(scores[1].0, "vector-only");
        assert!((scores[1].1 - 0.5 * std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(
            scores[2],
            ("opposite", 0.0),
            "negative similarity counts as none"
        );
    }

    #[test]
    fn ranking_is_precedence_then_score_then_recency_then_id() {
        let mut hits = vec![
            hit("company-best", MemoryLayer::Company, 0.99, 9),
            hit("user-low", MemoryLayer::User, 0.10, 9),
            hit("user-high-old", MemoryLayer::User, 0.50, 1),
            hit("user-high-new", MemoryLayer::User, 0.50, 5),
            hit("agent", MemoryLayer::Agent, 0.01, 0),
            hit("session-b", MemoryLayer::Session, 0.3, 3),
            hit("session-a", MemoryLayer::Session, 0.3, 3),
            hit("nan", MemoryLayer::Project, f64::NAN, 0),
            hit("project", MemoryLayer::Project, 0.2, 0),
        ];
        rank(&mut hits);
        let order: Vec<&str> = hits.iter().map(|h| h.memory.id.as_str()).collect();
        assert_eq!(
            order,
            [
                "agent",
                "user-high-new",
                "user-high-old",
                "user-low",
                "session-b",
                "session-a",
                "nan",
                "project",
                "company-best"
            ]
        );
    }
}
