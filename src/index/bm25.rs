//! BM25 ranking (Robertson & Zaragoza's Okapi BM25, k1 = 1.2, b = 0.75) over
//! code-aware tokens: identifiers are split on `snake_case` and `camelCase`
//! and kept whole too, so `parse_version` matches `version` and
//! `parse_version`.

use std::collections::HashMap;

/// Term-frequency saturation.
const K1: f64 = 1.2;
/// Length normalisation.
const B: f64 = 0.75;

/// English and Python words too common to say anything about relevance.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have", "i",
    "if", "in", "is", "it", "its", "not", "of", "on", "or", "that", "the", "this", "to", "was",
    "we", "when", "with", "self", "def", "return", "import", "none", "true", "false",
];

/// Splits text into lower-case terms.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.is_empty() {
            continue;
        }
        let parts = split_identifier(word);
        if parts.len() > 1 {
            push_term(&mut out, &word.to_lowercase());
        }
        for part in parts {
            push_term(&mut out, &part);
        }
    }
    out
}

fn push_term(out: &mut Vec<String>, term: &str) {
    let term = term.trim_matches('_');
    if term.len() >= 2 && !term.chars().all(|c| c.is_ascii_digit()) && !STOPWORDS.contains(&term) {
        out.push(term.to_string());
    }
}

/// `parseHTTPVersion_2` → `parse`, `http`, `version`, `2`.
fn split_identifier(word: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for piece in word.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<char> = piece.chars().collect();
        let mut current = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let boundary = i > 0
                && ((c.is_uppercase() && chars[i - 1].is_lowercase())
                    || (c.is_uppercase()
                        && chars[i - 1].is_uppercase()
                        && chars.get(i + 1).is_some_and(|n| n.is_lowercase()))
                    || (c.is_ascii_digit() != chars[i - 1].is_ascii_digit()));
            if boundary && !current.is_empty() {
                parts.push(std::mem::take(&mut current).to_lowercase());
            }
            current.push(c);
        }
        if !current.is_empty() {
            parts.push(current.to_lowercase());
        }
    }
    parts
}

/// An index over a set of documents.
pub struct Bm25 {
    docs: Vec<HashMap<String, u32>>,
    lengths: Vec<f64>,
    average_length: f64,
    document_frequency: HashMap<String, u32>,
}

impl Bm25 {
    pub fn new<'a>(documents: impl IntoIterator<Item = &'a str>) -> Bm25 {
        let mut docs = Vec::new();
        let mut lengths = Vec::new();
        let mut document_frequency: HashMap<String, u32> = HashMap::new();
        for text in documents {
            let terms = tokenize(text);
            lengths.push(terms.len() as f64);
            let mut tf: HashMap<String, u32> = HashMap::new();
            for t in terms {
                *tf.entry(t).or_default() += 1;
            }
            for t in tf.keys() {
                *document_frequency.entry(t.clone()).or_default() += 1;
            }
            docs.push(tf);
        }
        let average_length = if lengths.is_empty() {
            0.0
        } else {
            lengths.iter().sum::<f64>() / lengths.len() as f64
        };
        Bm25 {
            docs,
            lengths,
            average_length,
            document_frequency,
        }
    }

    /// Score of every document for `query`, in document order.
    pub fn scores(&self, query: &str) -> Vec<f64> {
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        let n = self.docs.len() as f64;
        (0..self.docs.len())
            .map(|d| {
                let norm = if self.average_length > 0.0 {
                    K1 * (1.0 - B + B * self.lengths[d] / self.average_length)
                } else {
                    K1
                };
                terms
                    .iter()
                    .filter_map(|t| {
                        let tf = f64::from(*self.docs[d].get(t)?);
                        let df = f64::from(self.document_frequency.get(t).copied().unwrap_or(0));
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        Some(idf * tf * (K1 + 1.0) / (tf + norm))
                    })
                    .sum()
            })
            .collect()
    }

    /// Indices of documents with a positive score, best first (ties by index).
    pub fn rank(&self, query: &str) -> Vec<(usize, f64)> {
        let mut ranked: Vec<(usize, f64)> = self
            .scores(query)
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenize_cases() {
        let cases: &[(&str, &[&str])] = &[
            ("parse_version", &["parse_version", "parse", "version"]),
            (
                "parseHTTPVersion",
                &["parsehttpversion", "parse", "http", "version"],
            ),
            ("The cache is stale", &["cache", "stale"]),
            ("x = 42", &[]),
            ("utf8 v2", &["utf8", "utf", "v2"]),
        ];
        for (text, expected) in cases {
            assert_eq!(tokenize(text), *expected, "{text}");
        }
    }

    #[test]
    fn ranks_the_relevant_document_first() {
        let docs = [
            "def add(a, b):\n    return a + b\n",
            "class VersionRange:\n    def matches(self, version): ...\n def parse_version(text): ...",
            "def slugify(text):\n    return text.lower()\n",
        ];
        let index = Bm25::new(docs.iter().copied());
        let ranked = index.rank("VersionRange.matches rejects a valid version");
        assert_eq!(ranked[0].0, 1);
        assert_eq!(ranked.len(), 1);
        assert!(index.rank("nothing relevant here at all").is_empty());
    }

    #[test]
    fn rarer_terms_weigh_more() {
        let docs = ["cache cache", "cache expire", "cache"];
        let index = Bm25::new(docs.iter().copied());
        let s = index.scores("cache expire");
        assert!(s[1] > s[0] && s[0] > 0.0, "{s:?}");
    }
}
