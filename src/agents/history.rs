//! History processing: which past observations an agent still sees whole.
//!
//! The last N observations stay whole and older ones collapse to one line
//! saying how many lines were left out (SWE-agent's "last N observations").
//! Collapsing changes an early message, and everything after the first
//! changed token must be evaluated again, so collapsing one observation
//! per turn would re-evaluate most of the conversation every turn. Instead
//! observations collapse in blocks: nothing changes until N + B are whole,
//! then the oldest B collapse at once, and the KV prefix stays reusable for
//! the B turns in between (measured in BENCHMARKS.md). When the prompt no
//! longer fits the context, more collapse at once ([`History::squeeze`]).

use serde::{Deserialize, Serialize};

/// How many of the latest observations stay whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "KeepRepr", into = "KeepRepr")]
pub enum Keep {
    All,
    Last(usize),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum KeepRepr {
    Number(usize),
    Word(String),
}

/// A history length that is neither a number nor `all`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a number or \"all\", not {0:?}")]
pub struct HistoryError(pub String);

impl TryFrom<KeepRepr> for Keep {
    type Error = HistoryError;
    fn try_from(r: KeepRepr) -> Result<Keep, HistoryError> {
        match r {
            KeepRepr::Number(n) => Ok(Keep::Last(n)),
            KeepRepr::Word(w) if w == "all" => Ok(Keep::All),
            KeepRepr::Word(w) => Err(HistoryError(w)),
        }
    }
}

impl From<Keep> for KeepRepr {
    fn from(k: Keep) -> KeepRepr {
        match k {
            Keep::All => KeepRepr::Word("all".into()),
            Keep::Last(n) => KeepRepr::Number(n),
        }
    }
}

impl std::str::FromStr for Keep {
    type Err = HistoryError;
    fn from_str(s: &str) -> Result<Keep, HistoryError> {
        if s == "all" {
            return Ok(Keep::All);
        }
        s.parse::<usize>()
            .map(Keep::Last)
            .map_err(|_| HistoryError(s.to_string()))
    }
}

/// Settings of history processing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistorySettings {
    /// Observations kept whole.
    pub keep: Keep,
    /// Observations collapsed at once (1 collapses one per turn).
    pub block: usize,
}

impl Default for HistorySettings {
    fn default() -> Self {
        HistorySettings {
            keep: Keep::Last(5),
            block: 5,
        }
    }
}

/// The text an observation of `lines` lines collapses to.
pub fn collapsed(lines: usize) -> String {
    format!("Old environment output: ({lines} lines omitted)")
}

/// How many of an episode's observations are collapsed (always the
/// oldest ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct History {
    collapsed: usize,
}

impl History {
    /// Observations `0..collapsed()` are shown collapsed.
    pub fn collapsed(&self) -> usize {
        self.collapsed
    }

    /// Updates the count for an episode of `total` observations: once
    /// `keep + block` are whole, all but the last `keep` collapse.
    pub fn update(&mut self, settings: &HistorySettings, total: usize) {
        let Keep::Last(keep) = settings.keep else {
            return;
        };
        let whole = total - self.collapsed.min(total);
        if whole >= keep + settings.block.max(1) {
            self.collapsed = total - keep;
        }
    }

    /// Collapses more because the prompt does not fit: first down to
    /// `keep`, then all but the latest. Returns false when nothing more
    /// can collapse.
    pub fn squeeze(&mut self, settings: &HistorySettings, total: usize) -> bool {
        let keep = match settings.keep {
            Keep::All => 1,
            Keep::Last(k) => k,
        };
        let target = if self.collapsed < total.saturating_sub(keep) {
            total.saturating_sub(keep)
        } else {
            total.saturating_sub(1)
        };
        if target <= self.collapsed {
            return false;
        }
        self.collapsed = target;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_collapse_in_blocks() {
        // (keep, block) -> collapsed count after each of 12 turns
        let cases: [(Keep, usize, [usize; 12]); 4] = [
            (Keep::Last(3), 1, [0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
            (Keep::Last(3), 3, [0, 0, 0, 0, 0, 3, 3, 3, 6, 6, 6, 9]),
            (Keep::Last(0), 2, [0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12]),
            (Keep::All, 3, [0; 12]),
        ];
        for (keep, block, expected) in cases {
            let settings = HistorySettings { keep, block };
            let mut h = History::default();
            let got: Vec<usize> = (1..=12)
                .map(|total| {
                    h.update(&settings, total);
                    h.collapsed()
                })
                .collect();
            assert_eq!(got, expected, "{keep:?} {block}");
        }
    }

    #[test]
    fn squeezing_collapses_down_to_keep_then_to_one() {
        let settings = HistorySettings {
            keep: Keep::Last(3),
            block: 5,
        };
        let mut h = History::default();
        h.update(&settings, 6);
        assert_eq!(h.collapsed(), 0);
        assert!(h.squeeze(&settings, 6));
        assert_eq!(h.collapsed(), 3);
        assert!(h.squeeze(&settings, 6));
        assert_eq!(h.collapsed(), 5);
        assert!(!h.squeeze(&settings, 6));
    }

    #[test]
    fn keep_reads_numbers_and_all() {
        assert_eq!("all".parse::<Keep>(), Ok(Keep::All));
        assert_eq!("4".parse::<Keep>(), Ok(Keep::Last(4)));
        assert!("some".parse::<Keep>().is_err());
        let s: HistorySettings = toml::from_str("keep = \"all\"\nblock = 2").unwrap();
        assert_eq!(s.keep, Keep::All);
        let s: HistorySettings = toml::from_str("keep = 7\nblock = 1").unwrap();
        assert_eq!(s.keep, Keep::Last(7));
    }
}
