//! Turning a user's search text into a full-text query without ever passing the text
//! itself as query syntax.
//!
//! The text is cut into words (runs of letters and digits, lowercased); everything else —
//! quotes, `*`, `-`, `:`, parentheses, `NEAR`, `AND` as operators — is a separator. The
//! words are then ORed, so a memory that contains more of them ranks higher and one
//! that contains only some still matches. Each backend receives the words as bound
//! parameters: Postgres as `plainto_tsquery('simple', $n)` operands, SQLite inside one
//! FTS5 expression of double-quoted strings, where a word can only ever be a phrase.

/// Most words taken from one query; the rest are ignored (a query is a question, not a
/// document).
pub const MAX_QUERY_TERMS: usize = 32;

/// Longest word kept, in characters; longer runs are cut (no tokenizer indexes them
/// whole anyway, and they would only inflate the query).
const MAX_TERM_CHARS: usize = 64;

/// The distinct words of a search, in the order they first appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextQuery {
    terms: Vec<String>,
}

impl TextQuery {
    /// The words of `text`, or `None` when it has none to search for.
    pub fn parse(text: &str) -> Option<TextQuery> {
        let mut terms: Vec<String> = Vec::new();
        for word in text.split(|c: char| !c.is_alphanumeric()) {
            if word.is_empty() {
                continue;
            }
            let term: String = word.to_lowercase().chars().take(MAX_TERM_CHARS).collect();
            if !terms.contains(&term) {
                terms.push(term);
                if terms.len() == MAX_QUERY_TERMS {
                    break;
                }
            }
        }
        (!terms.is_empty()).then_some(TextQuery { terms })
    }

    /// The words, lowercased, in first-appearance order.
    pub fn terms(&self) -> &[String] {
        &self.terms
    }

    /// The FTS5 expression `"w1" OR "w2" …`: each word a quoted string (embedded quotes
    /// doubled, although words never contain any), so nothing in it is an operator.
    pub(crate) fn fts5_expression(&self) -> String {
        self.terms
            .iter()
            .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" OR ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lowercased_deduplicated_and_stripped_of_syntax() {
        let q = TextQuery::parse(r#"Rust "tokio" OR rust* -NEAR(a b) col:x"#).unwrap();
        assert_eq!(
            q.terms(),
            ["rust", "tokio", "or", "near", "a", "b", "col", "x"]
        );
        assert_eq!(
            q.fts5_expression(),
            r#""rust" OR "tokio" OR "or" OR "near" OR "a" OR "b" OR "col" OR "x""#
        );
    }

    #[test]
    fn no_words_is_no_query() {
        assert_eq!(TextQuery::parse("  *** -- \"\" "), None);
        assert_eq!(TextQuery::parse(""), None);
    }

    #[test]
    fn queries_are_bounded() {
        let long = (0..100)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(
            TextQuery::parse(&long).unwrap().terms().len(),
            MAX_QUERY_TERMS
        );
        let word = "x".repeat(500);
        assert_eq!(
            TextQuery::parse(&word).unwrap().terms()[0].len(),
            MAX_TERM_CHARS
        );
    }

    #[test]
    fn letters_of_any_script_are_words() {
        let q = TextQuery::parse("Größe, naïve; 東京").unwrap();
        assert_eq!(q.terms(), ["größe", "naïve", "東京"]);
    }
}
