//! A GBNF matcher: the grammars llama.cpp's grammar sampler takes, parsed
//! and run as a pushdown automaton over Unicode code points, so the engine
//! can ask which text a grammar forces next (jump-forward decoding).
//!
//! [`Grammar::parse`] reads the GBNF llama.cpp accepts (rules over several
//! lines, comments, string literals and character classes with escapes,
//! `.`, groups, `|`, `?`, `*`, `+`, `{m}`, `{m,}`, `{m,n}`, rule
//! references; the root rule is `root`). A [`Matcher`] holds the set of
//! parse stacks after the text accepted so far, like llama.cpp's grammar
//! stacks: a text is admitted iff it is a prefix of some string of the
//! root rule's language.
//!
//! Unlike llama.cpp, counted repetitions are not expanded into chains of
//! rules: a stack frame carries the count, so `[^\n]{0,199}` costs one
//! stack whatever the count. Alternatives sharing a prefix are factored
//! into a prefix tree when the grammar is parsed, so a flat choice among
//! thousands of paths keeps only the stacks of the paths still possible.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Largest repetition count llama.cpp accepts (its
/// `MAX_REPETITION_THRESHOLD`): a larger minimum is refused, a larger
/// maximum means no maximum, as llama.cpp reads them.
pub const MAX_REPETITION: u32 = 2000;

/// The largest Unicode code point: a class `[^...]` or `.` admits every
/// code point up to it.
const MAX_CODE_POINT: u32 = 0x10FFFF;

/// The count of an unbounded repetition (`*`, `+`, `{m,}`).
const UNBOUNDED: u32 = u32::MAX;

/// Most expansion calls one step (or the start) may make. A step on the
/// grammars `engine::grammar` builds makes a few hundred at most;
/// repetitions nested in repetitions of nullable rules (`[a-z]*++++...`,
/// found by fuzzing) need exponentially many. Past this the matcher gives
/// up ([`Matcher::exhausted`]): it admits nothing more, so jump-forward
/// stops for that candidate, while llama.cpp's sampler still enforces the
/// grammar.
pub const MAX_EXPANSIONS: usize = 100_000;

/// Why a GBNF text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GbnfError {
    #[error("GBNF syntax error at line {line}, column {column} (rule `{rule}`): {message}; fix the grammar text there")]
    Syntax {
        /// The rule being read (empty before the first rule's name).
        rule: String,
        /// 1-based line of the offending character.
        line: usize,
        /// 1-based column (in characters) of the offending character.
        column: usize,
        message: String,
    },
    #[error(
        "GBNF rule `{name}` is used by rule `{by}` but never defined; define it or fix the name"
    )]
    Undefined { name: String, by: String },
    #[error("GBNF grammar has no `root` rule; the matcher starts from a rule named `root`")]
    NoRoot,
    #[error("GBNF rule `{0}` is left-recursive (it reaches itself before reading a character), which llama.cpp refuses too; rewrite it with a repetition")]
    LeftRecursion(String),
}

/// A set of code points: sorted, disjoint, non-adjacent inclusive ranges
/// (a negated class is stored as its complement).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Class {
    ranges: Vec<(u32, u32)>,
}

impl Class {
    fn new(mut ranges: Vec<(u32, u32)>, negated: bool) -> Class {
        ranges.retain(|&(lo, hi)| lo <= hi);
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        if !negated {
            return Class { ranges: merged };
        }
        let mut complement = Vec::with_capacity(merged.len() + 1);
        let mut next = 0u32;
        for (lo, hi) in merged {
            if lo > next {
                complement.push((next, lo - 1));
            }
            next = hi.saturating_add(1);
        }
        if next <= MAX_CODE_POINT {
            complement.push((next, MAX_CODE_POINT));
        }
        Class { ranges: complement }
    }

    fn matches(&self, c: char) -> bool {
        let c = c as u32;
        self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi)
    }

    /// The one code point this class admits, if it admits exactly one.
    fn single(&self) -> Option<char> {
        match self.ranges.as_slice() {
            [(lo, hi)] if lo == hi => char::from_u32(*lo),
            _ => None,
        }
    }
}

/// One element of an alternative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Elem {
    /// One character of class `.0`.
    Char(u32),
    /// Rule `.0`.
    Ref(u32),
    /// Rule `rule`, `min` to `max` times ([`UNBOUNDED`]: no maximum).
    Repeat { rule: u32, min: u32, max: u32 },
    /// `min` to `max` characters of class `class`.
    RepeatChar { class: u32, min: u32, max: u32 },
}

#[derive(Debug, Clone)]
struct Rule {
    name: String,
    alts: Vec<Vec<Elem>>,
}

/// A parsed GBNF grammar, ready for [`Matcher`]s.
#[derive(Debug, Clone)]
pub struct Grammar {
    rules: Vec<Rule>,
    classes: Vec<Class>,
    /// Whether each rule matches the empty string.
    nullable: Vec<bool>,
    root: u32,
}

impl Grammar {
    /// Reads a GBNF grammar as llama.cpp does; the root rule is `root`.
    pub fn parse(src: &str) -> Result<Grammar, GbnfError> {
        let mut parser = Parser {
            chars: src.chars().collect(),
            pos: 0,
            rule: String::new(),
            rules: Vec::new(),
            ids: HashMap::new(),
            first_use: Vec::new(),
            classes: Vec::new(),
            class_ids: HashMap::new(),
        };
        parser.parse_all()?;
        let Parser {
            rules,
            ids,
            first_use,
            classes,
            ..
        } = parser;
        let mut defined = Vec::with_capacity(rules.len());
        for (id, (name, alts)) in rules.into_iter().enumerate() {
            let Some(alts) = alts else {
                let by = first_use.get(id).cloned().unwrap_or_default();
                return Err(GbnfError::Undefined { name, by });
            };
            defined.push(Rule { name, alts });
        }
        let root = *ids.get("root").ok_or(GbnfError::NoRoot)?;
        let nullable = nullable(&defined);
        check_left_recursion(&defined, &nullable)?;
        factor(&mut defined);
        let nullable = self::nullable(&defined);
        Ok(Grammar {
            rules: defined,
            classes,
            nullable,
            root,
        })
    }

    /// Number of rules after repetitions became counters and shared
    /// prefixes of alternatives were factored out (groups and factored
    /// tails are rules of their own).
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    fn elem(&self, frame: &Frame) -> Option<Elem> {
        self.rules
            .get(frame.rule as usize)?
            .alts
            .get(frame.alt as usize)?
            .get(frame.pos as usize)
            .copied()
    }

    fn alt_len(&self, frame: &Frame) -> usize {
        self.rules
            .get(frame.rule as usize)
            .and_then(|r| r.alts.get(frame.alt as usize))
            .map_or(0, Vec::len)
    }

    fn alt_count(&self, rule: u32) -> u32 {
        self.rules
            .get(rule as usize)
            .map_or(0, |r| r.alts.len() as u32)
    }

    fn class(&self, id: u32) -> Option<&Class> {
        self.classes.get(id as usize)
    }
}

/// Which rules match the empty string (a fixpoint over the rules).
fn nullable(rules: &[Rule]) -> Vec<bool> {
    let mut out = vec![false; rules.len()];
    let mut changed = true;
    while changed {
        changed = false;
        for (id, rule) in rules.iter().enumerate() {
            if out[id] {
                continue;
            }
            let any = rule
                .alts
                .iter()
                .any(|alt| alt.iter().all(|e| elem_nullable(e, &out) == Some(true)));
            if any {
                out[id] = true;
                changed = true;
            }
        }
    }
    out
}

fn elem_nullable(elem: &Elem, nullable: &[bool]) -> Option<bool> {
    Some(match *elem {
        Elem::Char(_) => false,
        Elem::Ref(r) => *nullable.get(r as usize)?,
        Elem::Repeat { rule, min, .. } => min == 0 || *nullable.get(rule as usize)?,
        Elem::RepeatChar { min, .. } => min == 0,
    })
}

/// Refuses a rule that can reach itself before reading a character: its
/// stacks would grow without end (llama.cpp refuses it too).
fn check_left_recursion(rules: &[Rule], nullable: &[bool]) -> Result<(), GbnfError> {
    // Rules each rule may call before reading a character.
    let edges: Vec<Vec<u32>> = rules
        .iter()
        .map(|rule| {
            let mut to = Vec::new();
            for alt in &rule.alts {
                for elem in alt {
                    match *elem {
                        Elem::Ref(r) | Elem::Repeat { rule: r, .. } => to.push(r),
                        Elem::Char(_) | Elem::RepeatChar { .. } => {}
                    }
                    if elem_nullable(elem, nullable) != Some(true) {
                        break;
                    }
                }
            }
            to
        })
        .collect();
    // Depth-first search with colours: 1 on the path, 2 done.
    let mut colour = vec![0u8; rules.len()];
    for start in 0..rules.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        colour[start] = 1;
        while let Some(&mut (node, ref mut next)) = path.last_mut() {
            if let Some(&to) = edges[node].get(*next) {
                *next += 1;
                let to = to as usize;
                match colour.get(to) {
                    Some(0) => {
                        colour[to] = 1;
                        path.push((to, 0));
                    }
                    Some(1) => {
                        return Err(GbnfError::LeftRecursion(rules[to].name.clone()));
                    }
                    _ => {}
                }
            } else {
                colour[node] = 2;
                path.pop();
            }
        }
    }
    Ok(())
}

/// Factors the alternatives of every rule into a prefix tree: those with
/// the same first element become one alternative, their longest common
/// prefix followed by a new rule of their tails (factored in turn).
/// The language is unchanged; a choice among thousands of strings then
/// keeps one stack per distinct next character instead of one per string.
fn factor(rules: &mut Vec<Rule>) {
    let mut i = 0;
    while i < rules.len() {
        let alts = std::mem::take(&mut rules[i].alts);
        let name = rules[i].name.clone();
        let mut groups: Vec<Vec<Vec<Elem>>> = Vec::new();
        let mut index: HashMap<Option<Elem>, usize> = HashMap::new();
        for alt in alts {
            let key = alt.first().copied();
            let at = *index.entry(key).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[at].push(alt);
        }
        let mut out = Vec::with_capacity(groups.len());
        for mut group in groups {
            if group.len() == 1 || group[0].is_empty() {
                // One alternative, or empty ones (identical): keep one.
                group.truncate(1);
                out.extend(group);
                continue;
            }
            let mut shared = 1;
            while group
                .iter()
                .all(|alt| alt.len() > shared && alt[shared] == group[0][shared])
            {
                shared += 1;
            }
            let mut prefix = group[0][..shared].to_vec();
            let tails = group
                .into_iter()
                .map(|alt| alt[shared..].to_vec())
                .collect();
            let id = rules.len() as u32;
            rules.push(Rule {
                name: format!("{name}~{id}"),
                alts: tails,
            });
            prefix.push(Elem::Ref(id));
            out.push(prefix);
        }
        rules[i].alts = out;
        i += 1;
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    /// The rule being read, for error messages.
    rule: String,
    /// Every rule named so far: its name and, once defined, its alternatives.
    rules: Vec<(String, Option<Vec<Vec<Elem>>>)>,
    ids: HashMap<String, u32>,
    /// The rule that first referenced each rule.
    first_use: Vec<String>,
    classes: Vec<Class>,
    class_ids: HashMap<Class, u32>,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn error(&self, message: impl Into<String>) -> GbnfError {
        let before = &self.chars[..self.pos.min(self.chars.len())];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let column = before.iter().rev().take_while(|&&c| c != '\n').count() + 1;
        GbnfError::Syntax {
            rule: self.rule.clone(),
            line,
            column,
            message: message.into(),
        }
    }

    fn space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newline_ok => self.pos += 1,
                '#' => {
                    while matches!(self.peek(), Some(c) if c != '\r' && c != '\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        while matches!(self.peek(), Some(c) if is_word_char(c)) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expected a rule name (letters, digits, '-')"));
        }
        Ok(self.chars[start..self.pos].iter().collect())
    }

    fn rule_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.rules.len() as u32;
        self.rules.push((name.to_string(), None));
        self.first_use.push(self.rule.clone());
        self.ids.insert(name.to_string(), id);
        id
    }

    /// A new rule for a group or a repeated literal, named as llama.cpp
    /// names them (`{rule}_{id}`).
    fn anonymous(&mut self, alts: Vec<Vec<Elem>>) -> u32 {
        let id = self.rules.len() as u32;
        let name = format!("{}_{id}", self.rule);
        self.rules.push((name.clone(), Some(alts)));
        self.first_use.push(self.rule.clone());
        self.ids.insert(name, id);
        id
    }

    fn class_id(&mut self, class: Class) -> u32 {
        if let Some(&id) = self.class_ids.get(&class) {
            return id;
        }
        let id = self.classes.len() as u32;
        self.classes.push(class.clone());
        self.class_ids.insert(class, id);
        id
    }

    fn parse_all(&mut self) -> Result<(), GbnfError> {
        self.space(true);
        while self.peek().is_some() {
            self.parse_rule()?;
        }
        Ok(())
    }

    fn parse_rule(&mut self) -> Result<(), GbnfError> {
        let name = self.name()?;
        self.rule = name.clone();
        self.space(false);
        if !(self.peek() == Some(':')
            && self.peek_at(1) == Some(':')
            && self.peek_at(2) == Some('='))
        {
            return Err(self.error("expected `::=` after the rule name"));
        }
        self.pos += 3;
        self.space(true);
        let alts = self.alternates(false)?;
        let id = self.rule_id(&name);
        // A later definition replaces an earlier one, as in llama.cpp.
        if let Some(rule) = self.rules.get_mut(id as usize) {
            rule.1 = Some(alts);
        }
        match self.peek() {
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
            }
            Some('\n') => self.pos += 1,
            Some(c) => {
                return Err(self.error(format!("expected a newline or the end, found `{c}`")))
            }
            None => {}
        }
        self.space(true);
        Ok(())
    }

    fn alternates(&mut self, nested: bool) -> Result<Vec<Vec<Elem>>, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts)
    }

    /// One escaped or plain character of a literal or class.
    fn character(&mut self) -> Result<u32, GbnfError> {
        let Some(c) = self.peek() else {
            return Err(self.error("unexpected end of the grammar"));
        };
        if c != '\\' {
            self.pos += 1;
            return Ok(c as u32);
        }
        let escape = self.peek_at(1);
        let hex = match escape {
            Some('x') => 2,
            Some('u') => 4,
            Some('U') => 8,
            Some(c @ ('t' | 'r' | 'n' | '\\' | '"' | '[' | ']' | '-')) => {
                self.pos += 2;
                return Ok(match c {
                    't' => '\t',
                    'r' => '\r',
                    'n' => '\n',
                    c => c,
                } as u32);
            }
            _ => {
                return Err(self.error(
                    "unknown escape (known: \\x \\u \\U \\t \\r \\n \\\\ \\\" \\[ \\] \\-)",
                ))
            }
        };
        self.pos += 2;
        let mut value = 0u32;
        for _ in 0..hex {
            let Some(d) = self.peek().and_then(|c| c.to_digit(16)) else {
                return Err(self.error(format!("expected {hex} hex digits")));
            };
            value = (value << 4) | d;
            self.pos += 1;
        }
        Ok(value)
    }

    fn sequence(&mut self, nested: bool) -> Result<Vec<Elem>, GbnfError> {
        let mut seq: Vec<Elem> = Vec::new();
        // Where the last item (what a postfix operator repeats) starts.
        let mut last: Option<usize> = None;
        while let Some(c) = self.peek() {
            match c {
                '"' => {
                    self.pos += 1;
                    let start = seq.len();
                    while self.peek() != Some('"') {
                        let code = self.character()?;
                        let class = self.class_id(Class::new(vec![(code, code)], false));
                        seq.push(Elem::Char(class));
                    }
                    self.pos += 1;
                    // An empty literal is no item, as in llama.cpp.
                    last = (seq.len() > start).then_some(start);
                    self.space(nested);
                }
                '[' => {
                    self.pos += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    while self.peek() != Some(']') {
                        let lo = self.character()?;
                        let mut hi = lo;
                        if self.peek() == Some('-') && self.peek_at(1) != Some(']') {
                            self.pos += 1;
                            hi = self.character()?;
                        }
                        ranges.push((lo, hi));
                    }
                    self.pos += 1;
                    // `[]` and `[^]` are no item in llama.cpp: they match
                    // the empty string.
                    if ranges.is_empty() {
                        last = None;
                    } else {
                        last = Some(seq.len());
                        let class = self.class_id(Class::new(ranges, negated));
                        seq.push(Elem::Char(class));
                    }
                    self.space(nested);
                }
                '.' => {
                    self.pos += 1;
                    last = Some(seq.len());
                    let class = self.class_id(Class::new(vec![(0, MAX_CODE_POINT)], false));
                    seq.push(Elem::Char(class));
                    self.space(nested);
                }
                '(' => {
                    self.pos += 1;
                    self.space(true);
                    let alts = self.alternates(true)?;
                    if self.peek() != Some(')') {
                        return Err(self.error("expected `)` closing the group"));
                    }
                    self.pos += 1;
                    let id = self.anonymous(alts);
                    last = Some(seq.len());
                    seq.push(Elem::Ref(id));
                    self.space(nested);
                }
                '<' | '!' => {
                    return Err(
                        self.error("token references (`<[id]>`, `!<...>`) are not supported")
                    );
                }
                '*' | '+' | '?' => {
                    let (min, max) = match c {
                        '*' => (0, UNBOUNDED),
                        '+' => (1, UNBOUNDED),
                        _ => (0, 1),
                    };
                    last = Some(self.repeat(&mut seq, last, min, max)?);
                    self.pos += 1;
                    self.space(nested);
                }
                '{' => {
                    let at = self.pos;
                    self.pos += 1;
                    self.space(nested);
                    let min = self.int()?;
                    self.space(nested);
                    let max = match self.peek() {
                        Some('}') => min,
                        Some(',') => {
                            self.pos += 1;
                            self.space(nested);
                            let max = if matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                                let max = self.int()?;
                                self.space(nested);
                                max
                            } else {
                                UNBOUNDED
                            };
                            if self.peek() != Some('}') {
                                return Err(self.error("expected `}` closing the repetition"));
                            }
                            max
                        }
                        _ => return Err(self.error("expected `,` or `}` in the repetition")),
                    };
                    self.pos += 1;
                    self.space(nested);
                    if min > MAX_REPETITION {
                        self.pos = at;
                        return Err(self.error(format!(
                            "at least {min} repetitions: llama.cpp refuses more than {MAX_REPETITION}"
                        )));
                    }
                    let max = if max > MAX_REPETITION { UNBOUNDED } else { max };
                    if max < min {
                        self.pos = at;
                        return Err(self.error(format!(
                            "repetition {{{min},{max}}}: the maximum is below the minimum"
                        )));
                    }
                    let end = self.pos;
                    self.pos = at;
                    last = Some(self.repeat(&mut seq, last, min, max)?);
                    self.pos = end;
                }
                c if is_word_char(c) => {
                    let name = self.name()?;
                    let id = self.rule_id(&name);
                    last = Some(seq.len());
                    seq.push(Elem::Ref(id));
                    self.space(nested);
                }
                _ => break,
            }
        }
        Ok(seq)
    }

    fn int(&mut self) -> Result<u32, GbnfError> {
        let start = self.pos;
        while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expected an integer in the repetition"));
        }
        let digits: String = self.chars[start..self.pos].iter().collect();
        // More than u32 holds is more than MAX_REPETITION either way.
        Ok(digits.parse().unwrap_or(UNBOUNDED - 1))
    }

    /// Replaces the last item of `seq` by its repetition; returns where
    /// the repetition stands.
    fn repeat(
        &mut self,
        seq: &mut Vec<Elem>,
        last: Option<usize>,
        min: u32,
        max: u32,
    ) -> Result<usize, GbnfError> {
        let Some(start) = last.filter(|&s| s < seq.len()) else {
            return Err(self.error("a repetition (`*`, `+`, `?`, `{}`) needs an item before it"));
        };
        let item: Vec<Elem> = seq.drain(start..).collect();
        let elem = match item.as_slice() {
            [Elem::Char(class)] => Elem::RepeatChar {
                class: *class,
                min,
                max,
            },
            [Elem::Ref(rule)] => Elem::Repeat {
                rule: *rule,
                min,
                max,
            },
            _ => Elem::Repeat {
                rule: self.anonymous(vec![item]),
                min,
                max,
            },
        };
        seq.push(elem);
        Ok(start)
    }
}

/// A position in one alternative of a rule; at a repetition, `count` is
/// how many repetitions are complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Frame {
    rule: u32,
    alt: u32,
    pos: u32,
    count: u32,
}

/// The frames of one parse, innermost last. After each step every stack
/// is either empty (the text is a complete match) or its top frame stands
/// at a character element.
type Stack = Vec<Frame>;

/// The parse states after the text accepted so far (llama.cpp's grammar
/// stacks). Cloning copies the stacks (a few on the grammars
/// `engine::grammar` builds).
#[derive(Debug, Clone)]
pub struct Matcher {
    grammar: Arc<Grammar>,
    stacks: Vec<Stack>,
    /// A step ran past [`MAX_EXPANSIONS`]: the stacks are empty.
    exhausted: bool,
}

impl Matcher {
    /// A matcher at the start of `grammar`'s root rule.
    pub fn new(grammar: Arc<Grammar>) -> Matcher {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut budget = MAX_EXPANSIONS;
        for alt in 0..grammar.alt_count(grammar.root) {
            let frame = Frame {
                rule: grammar.root,
                alt,
                pos: 0,
                count: 0,
            };
            expand(&grammar, vec![frame], &mut out, &mut seen, &mut budget);
        }
        let exhausted = budget == 0;
        if exhausted {
            out.clear();
        }
        out.sort_unstable();
        out.dedup();
        Matcher {
            grammar,
            stacks: out,
            exhausted,
        }
    }

    /// Whether the matcher gave up on a step that needed more than
    /// [`MAX_EXPANSIONS`] expansions; it then admits nothing.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// The grammar this matcher runs.
    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

    /// Feeds `text` code point by code point. False, with the matcher
    /// unchanged, when the grammar does not admit it after what was
    /// accepted so far.
    pub fn accept(&mut self, text: &str) -> bool {
        let mut chars = text.chars();
        let Some(first) = chars.next() else {
            return true;
        };
        let mut stacks = match step(&self.grammar, &self.stacks, first) {
            Some(s) => s,
            None => return self.give_up(),
        };
        for c in chars {
            if stacks.is_empty() {
                return false;
            }
            stacks = match step(&self.grammar, &stacks, c) {
                Some(s) => s,
                None => return self.give_up(),
            };
        }
        if stacks.is_empty() {
            return false;
        }
        self.stacks = stacks;
        true
    }

    /// Marks the matcher exhausted (see [`MAX_EXPANSIONS`]); false.
    fn give_up(&mut self) -> bool {
        self.exhausted = true;
        self.stacks.clear();
        false
    }

    /// Whether the text accepted so far is a complete match of `root`
    /// (llama.cpp then allows the end of generation).
    pub fn can_end(&self) -> bool {
        self.stacks.iter().any(Vec::is_empty)
    }

    /// Whether the grammar admits at least one more character.
    pub fn can_continue(&self) -> bool {
        self.stacks.iter().any(|s| !s.is_empty())
    }

    /// Whether `c` may come next.
    pub fn allows(&self, c: char) -> bool {
        self.stacks
            .iter()
            .any(|s| next_class(&self.grammar, s).is_some_and(|class| class.matches(c)))
    }

    /// The longest text, up to `max_chars` code points, that every
    /// continuation the grammar admits starts with: extended while exactly
    /// one next character is allowed and the text so far cannot end.
    /// Empty when the next character branches or the match may end here.
    pub fn forced(&self, max_chars: usize) -> String {
        let mut out = String::new();
        let mut owned: Option<Vec<Stack>> = None;
        for _ in 0..max_chars {
            let stacks = owned.as_ref().unwrap_or(&self.stacks);
            let Some(c) = only_next(&self.grammar, stacks) else {
                break;
            };
            let Some(next) = step(&self.grammar, stacks, c).filter(|n| !n.is_empty()) else {
                break;
            };
            out.push(c);
            owned = Some(next);
        }
        out
    }

    /// Number of distinct parse stacks now (a measure of the cost of the
    /// next step).
    pub fn states(&self) -> usize {
        self.stacks.len()
    }
}

/// The class the top frame of `stack` reads, if it stands at a character.
fn next_class<'g>(grammar: &'g Grammar, stack: &Stack) -> Option<&'g Class> {
    let top = stack.last()?;
    match grammar.elem(top)? {
        Elem::Char(class) | Elem::RepeatChar { class, .. } => grammar.class(class),
        Elem::Ref(_) | Elem::Repeat { .. } => None,
    }
}

/// The one character every stack allows next, if there is exactly one and
/// no stack may end here.
fn only_next(grammar: &Grammar, stacks: &[Stack]) -> Option<char> {
    let mut only = None;
    for stack in stacks {
        let c = next_class(grammar, stack)?.single()?;
        match only {
            None => only = Some(c),
            Some(o) if o != c => return None,
            Some(_) => {}
        }
    }
    only
}

/// The stacks after reading `c` from `stacks` (empty: `c` is refused);
/// `None` when that needs more than [`MAX_EXPANSIONS`] expansions.
fn step(grammar: &Grammar, stacks: &[Stack], c: char) -> Option<Vec<Stack>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut budget = MAX_EXPANSIONS;
    for stack in stacks {
        let Some(top) = stack.last() else {
            continue;
        };
        let advanced = match grammar.elem(top) {
            Some(Elem::Char(class)) if grammar.class(class).is_some_and(|k| k.matches(c)) => {
                Frame {
                    pos: top.pos + 1,
                    count: 0,
                    ..*top
                }
            }
            Some(Elem::RepeatChar { class, .. })
                if grammar.class(class).is_some_and(|k| k.matches(c)) =>
            {
                Frame {
                    count: top.count + 1,
                    ..*top
                }
            }
            _ => continue,
        };
        let mut next = stack.clone();
        if let Some(last) = next.last_mut() {
            *last = advanced;
        }
        expand(grammar, next, &mut out, &mut seen, &mut budget);
    }
    if budget == 0 {
        return None;
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Pushes onto `out` every stack reachable from `stack` without reading a
/// character whose top stands at a character (or which is empty: the
/// match is complete). `seen` holds the stacks already expanded at a
/// repetition of a nullable rule, where the expansion could loop.
fn expand(
    grammar: &Grammar,
    mut stack: Stack,
    out: &mut Vec<Stack>,
    seen: &mut HashSet<Stack>,
    budget: &mut usize,
) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    loop {
        let Some(&top) = stack.last() else {
            out.push(stack);
            return;
        };
        if top.pos as usize >= grammar.alt_len(&top) {
            // This rule is complete: return into the caller.
            stack.pop();
            let Some(parent) = stack.last_mut() else {
                out.push(stack);
                return;
            };
            match grammar.elem(parent) {
                Some(Elem::Repeat { min, max, .. }) => {
                    parent.count += 1;
                    // Past the minimum, more repetitions of an unbounded
                    // one all behave alike: one state for all of them.
                    if max == UNBOUNDED && parent.count > min {
                        parent.count = min;
                    }
                }
                _ => {
                    parent.pos += 1;
                    parent.count = 0;
                }
            }
            continue;
        }
        let Some(elem) = grammar.elem(&top) else {
            return;
        };
        match elem {
            Elem::Char(_) => {
                out.push(stack);
                return;
            }
            Elem::RepeatChar { min, max, .. } => {
                let more = top.count < max;
                if top.count < min {
                    out.push(stack);
                    return;
                }
                if more {
                    out.push(stack.clone());
                }
                if let Some(last) = stack.last_mut() {
                    last.pos += 1;
                    last.count = 0;
                }
            }
            Elem::Ref(rule) => {
                // A call in last position returns straight to the caller.
                if top.pos as usize + 1 == grammar.alt_len(&top) {
                    stack.pop();
                }
                let alts = grammar.alt_count(rule);
                for alt in 0..alts {
                    let mut s = if alt + 1 == alts {
                        std::mem::take(&mut stack)
                    } else {
                        stack.clone()
                    };
                    s.push(Frame {
                        rule,
                        alt,
                        pos: 0,
                        count: 0,
                    });
                    expand(grammar, s, out, seen, budget);
                }
                return;
            }
            Elem::Repeat { rule, min, max } => {
                if grammar.nullable.get(rule as usize) == Some(&true) && !seen.insert(stack.clone())
                {
                    return;
                }
                if top.count >= min {
                    let mut past = stack.clone();
                    if let Some(last) = past.last_mut() {
                        last.pos += 1;
                        last.count = 0;
                    }
                    expand(grammar, past, out, seen, budget);
                }
                if top.count < max {
                    for alt in 0..grammar.alt_count(rule) {
                        let mut s = stack.clone();
                        s.push(Frame {
                            rule,
                            alt,
                            pos: 0,
                            count: 0,
                        });
                        expand(grammar, s, out, seen, budget);
                    }
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{self, Action, Arg, DefinitionTarget, ShownFile, ShownRun};
    use std::error::Error;
    use std::time::Instant;

    type TestResult = Result<(), Box<dyn Error>>;

    /// Repetitions nested in repetitions of a nullable rule need
    /// exponentially many expansions (found by fuzzing: it hung); the
    /// matcher gives up instead, and admits nothing more. A few levels
    /// stay within the budget and match as before.
    #[test]
    fn nested_nullable_repetitions_exhaust_the_matcher_instead_of_hanging() -> TestResult {
        let deep = format!("root ::= [a-z]*{}", "+".repeat(64));
        let mut m = matcher(&deep)?;
        assert!(!m.accept("ab"));
        assert!(m.exhausted(), "the deep grammar exhausts the budget");
        assert!(!m.accept("a"));
        assert_eq!(m.forced(8), "");
        let mut shallow = matcher("root ::= [a-z]*++")?;
        assert!(shallow.accept("ab"));
        assert!(shallow.can_end() && !shallow.exhausted());
        Ok(())
    }

    fn matcher(src: &str) -> Result<Matcher, GbnfError> {
        Ok(Matcher::new(Arc::new(Grammar::parse(src)?)))
    }

    /// Feeds `text` one code point at a time: the index (in code points)
    /// of the first one refused, or None.
    fn refused_at(m: &mut Matcher, text: &str) -> Option<usize> {
        for (i, c) in text.chars().enumerate() {
            if !m.accept(c.encode_utf8(&mut [0; 4])) {
                return Some(i);
            }
        }
        None
    }

    /// Checks `text` against a fresh matcher of `src` both code point by
    /// code point and in one call; returns (refused at, can end).
    fn run(src: &str, text: &str) -> Result<(Option<usize>, bool), Box<dyn Error>> {
        let mut m = matcher(src)?;
        let at = refused_at(&mut m, text);
        let mut whole = matcher(src)?;
        assert_eq!(whole.accept(text), at.is_none(), "{src:?} {text:?}");
        Ok((at, m.can_end()))
    }

    #[test]
    fn parse_errors_name_the_rule_and_the_place() {
        let syntax = |rule: &str, line, column, message: &str| GbnfError::Syntax {
            rule: rule.into(),
            line,
            column,
            message: message.into(),
        };
        let cases = [
            (
                "root ::= \"a",
                syntax("root", 1, 12, "unexpected end of the grammar"),
            ),
            (
                "root ::= [a-",
                syntax("root", 1, 13, "unexpected end of the grammar"),
            ),
            (
                "root ::= \"\\q\"",
                syntax(
                    "root",
                    1,
                    11,
                    "unknown escape (known: \\x \\u \\U \\t \\r \\n \\\\ \\\" \\[ \\] \\-)",
                ),
            ),
            (
                "root ::= \"\\x4\"",
                syntax("root", 1, 14, "expected 2 hex digits"),
            ),
            (
                "root := \"x\"",
                syntax("root", 1, 6, "expected `::=` after the rule name"),
            ),
            (
                "root ::= \"x\"\n  ::= \"y\"",
                syntax("root", 2, 3, "expected a rule name (letters, digits, '-')"),
            ),
            (
                "root ::= a\na ::= (\"x\" | \"y\"\n",
                syntax("a", 3, 1, "expected `)` closing the group"),
            ),
            (
                "root ::= * \"x\"",
                syntax(
                    "root",
                    1,
                    10,
                    "a repetition (`*`, `+`, `?`, `{}`) needs an item before it",
                ),
            ),
            (
                "root ::= \"x\"{3,2}",
                syntax(
                    "root",
                    1,
                    13,
                    "repetition {3,2}: the maximum is below the minimum",
                ),
            ),
            (
                "root ::= \"x\"{2001}",
                syntax(
                    "root",
                    1,
                    13,
                    "at least 2001 repetitions: llama.cpp refuses more than 2000",
                ),
            ),
            (
                "root ::= \"x\"{1;2}",
                syntax("root", 1, 15, "expected `,` or `}` in the repetition"),
            ),
            (
                "root ::= <[12]>",
                syntax(
                    "root",
                    1,
                    10,
                    "token references (`<[id]>`, `!<...>`) are not supported",
                ),
            ),
            (
                "root ::= \"x\" )",
                syntax("root", 1, 14, "expected a newline or the end, found `)`"),
            ),
            (
                "root ::= item\nitem ::= \"x\" other",
                GbnfError::Undefined {
                    name: "other".into(),
                    by: "item".into(),
                },
            ),
            ("item ::= \"x\"", GbnfError::NoRoot),
            (
                "root ::= list\nlist ::= list \",\" \"x\" | \"x\"",
                GbnfError::LeftRecursion("list".into()),
            ),
            // Through a nullable prefix and a group.
            (
                "root ::= [a]? (root \"x\") | \"y\"",
                GbnfError::LeftRecursion("root".into()),
            ),
        ];
        for (src, want) in cases {
            assert_eq!(Grammar::parse(src).err(), Some(want), "{src:?}");
        }
        let shown = syntax("root", 2, 3, "x").to_string();
        assert_eq!(
            shown,
            "GBNF syntax error at line 2, column 3 (rule `root`): x; fix the grammar text there"
        );
    }

    #[test]
    fn texts_are_admitted_iff_they_prefix_the_language() -> TestResult {
        // (grammar, text, first refused code point, can end after the text)
        let cases: &[(&str, &str, Option<usize>, bool)] = &[
            ("root ::= \"ab\"", "ab", None, true),
            ("root ::= \"ab\"", "a", None, false),
            ("root ::= \"ab\"", "abc", Some(2), true),
            ("root ::= \"ab\"", "b", Some(0), false),
            ("root ::= \"ab\" | \"ac\" | \"a\"", "a", None, true),
            ("root ::= \"ab\" | \"ac\" | \"a\"", "ac", None, true),
            ("root ::= \"ab\" | \"ac\" | \"a\"", "ad", Some(1), true),
            ("root ::= [a-c]+", "abcab", None, true),
            ("root ::= [a-c]+", "abd", Some(2), true),
            ("root ::= [a-c]+", "", None, false),
            ("root ::= [^a-c\\n]*", "xyz d", None, true),
            ("root ::= [^a-c\\n]*", "xyb", Some(2), true),
            ("root ::= [^a-c\\n]*", "x\n", Some(1), true),
            ("root ::= . \"!\"", "é!", None, true),
            ("root ::= . \"!\"", "ab", Some(1), false),
            ("root ::= \"\\x41\\u00e9\\t\\\"\\\\\"", "Aé\t\"\\", None, true),
            ("root ::= [\\]\\-a]+", "]-a", None, true),
            ("root ::= [\\]\\-a]+", "]b", Some(1), true),
            ("root ::= [a-]", "-", None, true),
            ("root ::= \"é\" [α-ω]", "éλ", None, true),
            ("root ::= \"é\" [α-ω]", "e", Some(0), false),
            // Counted repetitions.
            ("root ::= \"x\"{3}", "xxx", None, true),
            ("root ::= \"x\"{3}", "xx", None, false),
            ("root ::= \"x\"{3}", "xxxx", Some(3), true),
            ("root ::= \"ab\"{2,}", "ababab", None, true),
            ("root ::= \"ab\"{2,}", "aba", None, false),
            ("root ::= \"ab\"{2,}", "abb", Some(2), false),
            ("root ::= [0-9]{1,3} \";\"", "123;", None, true),
            ("root ::= [0-9]{1,3} \";\"", "1234", Some(3), false),
            ("root ::= [0-9]{1,3} \";\"", ";", Some(0), false),
            ("root ::= (\"a\" | \"bc\"){2,3} \".\"", "bca.", None, true),
            ("root ::= (\"a\" | \"bc\"){2,3} \".\"", "a.", Some(1), false),
            ("root ::= (\"a\" | \"bc\"){2,3} \".\"", "aaaa", Some(3), false),
            ("root ::= (\"ab\"{1,2} \"-\"){2}", "abab-ab-", None, true),
            ("root ::= (\"ab\"{1,2} \"-\"){2}", "ababab", Some(4), false),
            ("root ::= \"x\"? \"y\"", "y", None, true),
            ("root ::= \"x\"? \"y\"", "xy", None, true),
            ("root ::= \"x\"? \"y\"", "xx", Some(1), false),
            ("root ::= \"x\"{0}", "", None, true),
            ("root ::= \"x\"{0} \"y\"", "x", Some(0), false),
            // A repeated rule that matches the empty string: no endless loop.
            ("root ::= (\"a\"?)* \"b\"", "aab", None, true),
            ("root ::= (\"a\"? \"c\"?){0,5} \"b\"", "acacaccb", None, true),
            ("root ::= (\"a\"?){2,4} \"b\"", "aaaab", None, true),
            ("root ::= (\"a\"?){2,4} \"b\"", "aaaaa", Some(4), false),
            // `[]` and `""` are no item: they match the empty string.
            ("root ::= \"a\" [] \"\" \"b\"", "ab", None, true),
            // Rules over several lines, comments, references before definitions.
            (
                "# a comment\nroot ::= item (\n  \",\" item\n)*   # trailing\n\nitem ::=\n  \"x\" |\n  \"yz\"\n",
                "x,yz,x",
                None,
                true,
            ),
            ("root ::= a b\na ::= \"1\"\nb ::= \"2\"\r\n", "12", None, true),
            // A later definition replaces an earlier one, as in llama.cpp.
            ("root ::= a\na ::= \"1\"\na ::= \"2\"", "1", Some(0), false),
            // Recursion that is not left recursion.
            ("root ::= \"(\" root \")\" | \"x\"", "((x))", None, true),
            ("root ::= \"(\" root \")\" | \"x\"", "((x)x", Some(4), false),
            // The end of the language: nothing more is admitted.
            ("root ::= \"a\" | \"\"", "", None, true),
            ("root ::= \"a\" | \"\"", "aa", Some(1), true),
        ];
        for &(src, text, at, end) in cases {
            assert_eq!(run(src, text)?, (at, end), "{src:?} on {text:?}");
        }
        Ok(())
    }

    #[test]
    fn refused_text_leaves_the_matcher_unchanged() -> TestResult {
        let mut m = matcher("root ::= \"abc\" | \"abd\"")?;
        assert!(m.accept("a"));
        assert!(!m.accept("bx"));
        assert!(!m.accept("x"));
        assert_eq!(m.forced(10), "b");
        assert!(m.accept("bd"));
        assert!(m.can_end());
        assert!(!m.can_continue());
        assert!(m.accept(""));
        assert!(!m.accept("d"));
        Ok(())
    }

    #[test]
    fn forced_text_stops_where_the_grammar_branches_or_may_end() -> TestResult {
        // (grammar, text accepted first, max chars, forced)
        let cases: &[(&str, &str, usize, &str)] = &[
            ("root ::= \"hello\" [ab]", "", 100, "hello"),
            ("root ::= \"hello\" [ab]", "", 3, "hel"),
            ("root ::= \"hello\" [ab]", "hello", 100, ""),
            ("root ::= \"hello\" [ab]", "hellob", 100, ""),
            ("root ::= \"ab\" \"c\"? \"d\"", "", 100, "ab"),
            ("root ::= \"x\"{3} \"y\"", "x", 100, "xxy"),
            ("root ::= \"x\"{1,3} \"y\"", "x", 100, ""),
            ("root ::= \"a\" [b] [b-b] \"é\"", "", 100, "abbé"),
            // Every alternative agrees on the next characters.
            (
                "root ::= \"key: \" (\"1\" | \"2\") | \"key: 3\"",
                "",
                100,
                "key: ",
            ),
            // The match may end here: nothing is forced.
            ("root ::= \"a\" \"b\"?", "a", 100, ""),
            ("root ::= \"a\"+ \"b\"", "", 100, "a"),
            ("root ::= \"a\"+ \"b\"", "a", 100, ""),
        ];
        for &(src, text, max, want) in cases {
            let mut m = matcher(src)?;
            assert!(m.accept(text), "{src:?} {text:?}");
            assert_eq!(m.forced(max), want, "{src:?} after {text:?}");
        }
        Ok(())
    }

    /// Feeds each valid reply code point by code point, checks it ends a
    /// match, and checks each invalid text is refused at its index.
    fn check_replies(g: &str, valid: &[&str], invalid: &[(&str, usize)]) -> TestResult {
        let grammar = Arc::new(Grammar::parse(g)?);
        for reply in valid {
            let mut m = Matcher::new(grammar.clone());
            assert_eq!(refused_at(&mut m, reply), None, "{reply:?}");
            assert!(m.can_end(), "{reply:?} cannot end");
        }
        for &(text, at) in invalid {
            let mut m = Matcher::new(grammar.clone());
            assert_eq!(refused_at(&mut m, text), Some(at), "{text:?}");
        }
        Ok(())
    }

    /// After each prefix, the exact forced text.
    fn check_forced(g: &str, cases: &[(&str, &str)]) -> TestResult {
        let grammar = Arc::new(Grammar::parse(g)?);
        for &(prefix, want) in cases {
            let mut m = Matcher::new(grammar.clone());
            assert!(m.accept(prefix), "{prefix:?}");
            assert_eq!(m.forced(usize::MAX), want, "after {prefix:?}");
        }
        Ok(())
    }

    #[test]
    fn choice_grammars() -> TestResult {
        let g = grammar::choice(&["src/a/b.py", "src/a/c.py"])?;
        check_replies(
            &g,
            &["src/a/b.py", "src/a/c.py"],
            &[("src/a/d.py", 6), ("src/a/b.pyc", 10), ("tests", 0)],
        )?;
        check_forced(
            &g,
            &[
                ("", "src/a/"),
                ("src/a/", ""),
                ("src/a/c", ".py"),
                ("src/a/c.py", ""),
            ],
        )?;
        // A flat choice among 2,000 paths is factored into a prefix tree.
        let paths: Vec<String> = (0..20)
            .flat_map(|d| (0..100).map(move |f| format!("pkg/sub{d}/mod{f}.py")))
            .collect();
        let g = grammar::choice(&paths)?;
        check_replies(
            &g,
            &[
                "pkg/sub7/mod42.py",
                "pkg/sub19/mod99.py",
                "pkg/sub0/mod0.py",
            ],
            &[("pkg/sub20/", 8), ("pkg/sub1/mod100", 14), ("pkg/x", 4)],
        )?;
        check_forced(
            &g,
            &[
                ("", "pkg/sub"),
                ("pkg/sub1", ""),
                ("pkg/sub19", "/mod"),
                ("pkg/sub19/mod99", ".py"),
            ],
        )?;
        let mut m = Matcher::new(Arc::new(Grammar::parse(&g)?));
        assert_eq!(m.states(), 1);
        assert!(m.accept("pkg/sub1"));
        // One stack per next character: `/` (sub1) or a digit (sub10-19).
        assert_eq!(m.states(), 11);
        Ok(())
    }

    #[test]
    fn search_replace_grammars() -> TestResult {
        let g = grammar::search_replace(&["pkg/a.py", "pkg/b.py"])?;
        let one = "pkg/a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n";
        let two = "pkg/a.py\n<<<<<<< SEARCH\n    return w\n\n=======\n>>>>>>> REPLACE\npkg/b.py\n<<<<<<< SEARCH\ny\n=======\n    return +w\n>>>>>>> REPLACE\n";
        check_replies(
            &g,
            &[one, two],
            &[
                ("pkg/c.py", 4),
                ("pkg/a.py\n<<<<<<< SEARCH\n<x", 24),
                ("pkg/a.py\n<<<<<<< SEARCH\n=======\n", 24),
                (
                    "pkg/a.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\nx",
                    52,
                ),
                (
                    &format!("pkg/a.py\n<<<<<<< SEARCH\n{}\n", "z".repeat(201)),
                    224,
                ),
            ],
        )?;
        check_forced(
            &g,
            &[
                ("", "pkg/"),
                ("pkg/a", ".py\n<<<<<<< SEARCH\n"),
                ("pkg/a.py\n<<<<<<< SEARCH\nx = 1\n", ""),
                ("pkg/a.py\n<<<<<<< SEARCH\nx = 1\n=", "======\n"),
                ("pkg/a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n", ""),
                (
                    "pkg/a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>",
                    ">>>>>> REPLACE\n",
                ),
                (one, ""),
            ],
        )?;
        let g = grammar::search_replace_with_reasoning(&["t.py"])?;
        check_replies(
            &g,
            &[
                "Reasoning: k is ignored.\n\nt.py\n<<<<<<< SEARCH\n    w *= k\n    return w\n=======\n    return w * k\n>>>>>>> REPLACE\n",
                "Reasoning: both.\n\nt.py\n<<<<<<< SEARCH\n    return w\n=======\n    return -w\n>>>>>>> REPLACE\nt.py\n<<<<<<< SEARCH\n    return w\n=======\n    return +w\n>>>>>>> REPLACE\n",
            ],
            &[("Reasoning:\n", 10), ("Reasoning: \n", 11), ("Reasoning: x\n\nu", 14)],
        )?;
        check_forced(
            &g,
            &[
                ("", "Reasoning: "),
                ("Reasoning: x.\n", "\nt.py\n<<<<<<< SEARCH\n"),
            ],
        )?;
        Ok(())
    }

    /// A 3-line span of `a.py` (lines 4-6), shown whole.
    fn three_lines() -> Vec<ShownFile> {
        vec![ShownFile {
            path: "a.py".into(),
            runs: vec![ShownRun {
                first: 4,
                lines: vec!["def f(x):".into(), "    return \"x\"".into(), "".into()],
            }],
        }]
    }

    #[test]
    fn anchored_grammars() -> TestResult {
        let g = grammar::anchored(&three_lines())?;
        check_replies(
            &g,
            &[
                "Reasoning: x.\n\na.py\n<<<<<<< SEARCH\ndef f(x):\n    return \"x\"\n=======\n    return x\n>>>>>>> REPLACE\n",
                "Reasoning: x.\n\na.py\n<<<<<<< SEARCH\n\n=======\n>>>>>>> REPLACE\na.py\n<<<<<<< SEARCH\n    return \"x\"\n=======\n    return \"y\"\n>>>>>>> REPLACE\n",
            ],
            &[
                ("Reasoning: x.\n\na.py\n<<<<<<< SEARCH\ndef g", 39),
                ("Reasoning: x.\n\na.py\n<<<<<<< SEARCH\n=", 35),
                // Line 4 then line 6: not a run.
                ("Reasoning: x.\n\na.py\n<<<<<<< SEARCH\ndef f(x):\n\n", 45),
            ],
        )?;
        check_forced(
            &g,
            &[
                ("Reasoning: x.\n", "\na.py\n<<<<<<< SEARCH\n"),
                ("Reasoning: x.\n\na.py\n<<<<<<< SEARCH\nd", "ef f(x):\n"),
                ("Reasoning: x.\n\na.py\n<<<<<<< SEARCH\ndef f(x):\n", ""),
                (
                    "Reasoning: x.\n\na.py\n<<<<<<< SEARCH\ndef f(x):\n ",
                    "   return \"x\"\n",
                ),
                (
                    "Reasoning: x.\n\na.py\n<<<<<<< SEARCH\ndef f(x):\n    return \"x\"\n\n",
                    "=======\n",
                ),
            ],
        )?;
        Ok(())
    }

    #[test]
    fn lines_grammars() -> TestResult {
        let g = grammar::lines(&three_lines())?;
        check_replies(
            &g,
            &[
                "Reasoning: x.\n\na.py\nreplace lines 4-5 with:\n```\ndef f(y):\n    return y\n```\n",
                "Reasoning: x.\n\na.py\nreplace lines 6-6 with:\n```\n```\na.py\nreplace lines 4-4 with:\n```\n  # note\n\n```\n",
            ],
            &[
                ("Reasoning: x.\n\na.py\nreplace lines 7", 34),
                ("Reasoning: x.\n\na.py\nreplace lines 5-4", 36),
                ("Reasoning: x.\n\na.py\nreplace lines 4-4 with:\n```\n  3", 50),
                ("Reasoning: x.\n\na.py\nreplace lines 4-4 with:\n```\n|", 48),
                // One line replaced: at most 1 + 4 new lines.
                (
                    "Reasoning: x.\n\na.py\nreplace lines 4-4 with:\n```\na\nb\nc\nd\ne\nf",
                    58,
                ),
            ],
        )?;
        check_forced(
            &g,
            &[
                ("Reasoning: x.\n", "\na.py\nreplace lines "),
                ("Reasoning: x.\n\na.py\nreplace lines 4", "-"),
                ("Reasoning: x.\n\na.py\nreplace lines 4-5", " with:\n```\n"),
                (
                    "Reasoning: x.\n\na.py\nreplace lines 4-5 with:\n```\n`",
                    "``\n",
                ),
            ],
        )?;
        Ok(())
    }

    #[test]
    fn definition_grammars() -> TestResult {
        let targets = [
            DefinitionTarget {
                label: "a.py::f".into(),
                indent: String::new(),
                lead: "def f(".into(),
            },
            DefinitionTarget {
                label: "a.py::C.m".into(),
                indent: "    ".into(),
                lead: "    async def m(".into(),
            },
        ];
        let g = grammar::definition(&targets)?;
        check_replies(
            &g,
            &[
                "Reasoning: x.\n\na.py::f\n```\ndef f(x, y=1):\n    return x\n```\n",
                "Reasoning: x.\n\na.py::C.m\n```\n    @cached\n    async def m(self):\n        return 1\n```\n",
            ],
            &[
                ("Reasoning: x.\n\na.py::f\n```\ndef g", 31),
                ("Reasoning: x.\n\na.py::C.m\n```\n@", 29),
            ],
        )?;
        check_forced(
            &g,
            &[
                ("Reasoning: x.\n\n", "a.py::"),
                ("Reasoning: x.\n\na.py::f", "\n```\n"),
                ("Reasoning: x.\n\na.py::f\n```\nd", "ef f("),
                ("Reasoning: x.\n\na.py::C", ".m\n```\n    "),
                ("Reasoning: x.\n\na.py::C.m\n```\n    a", "sync def m("),
            ],
        )?;
        Ok(())
    }

    /// An action set like the ACI's, over `files`.
    fn aci_like(files: &[String]) -> Vec<Action> {
        let act = |name: &str, args: Vec<Arg>| Action {
            name: name.into(),
            args,
        };
        let optional = |a: Arg| Arg::Optional(Box::new(a));
        vec![
            act(
                "open",
                vec![Arg::Choice(files.to_vec()), optional(Arg::Integer)],
            ),
            act("goto", vec![Arg::Integer]),
            act("scroll_up", vec![]),
            act(
                "search_dir",
                vec![
                    Arg::Term,
                    optional(Arg::Choice(vec!["src".into(), ".".into()])),
                ],
            ),
            act(
                "search_method",
                vec![Arg::Identifier, optional(Arg::Identifier)],
            ),
            act("view_symbol", vec![Arg::Symbol(files.to_vec())]),
            act("edit", vec![Arg::Range, Arg::Lines("end_of_edit".into())]),
            act(
                "str_replace",
                vec![Arg::Choice(files.to_vec()), Arg::SearchReplace],
            ),
            act("run", vec![Arg::Text]),
            act("submit", vec![]),
            act("submit_test", vec![Arg::Choice(files.to_vec()), Arg::Text]),
        ]
    }

    #[test]
    fn action_and_turn_grammars() -> TestResult {
        let files = vec!["src/a/b.py".to_string(), "src/a/c.py".to_string()];
        let g = grammar::actions(&aci_like(&files))?;
        check_replies(
            &g,
            &[
                "open src/a/b.py 12\n",
                "open src/a/c.py\n",
                "goto 7\n",
                "scroll_up\n",
                "search_dir \"def parse\" src\n",
                "search_dir parse\n",
                "search_method parse Parser\n",
                "view_symbol src/a/b.py::Parser.parse\n",
                "edit 3:4\n    x = 1\n\nend_of_edi\nend_of_edit\n",
                "str_replace src/a/b.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
                "run python -m pytest -x tests\n",
                "submit\n",
                "submit_test src/a/c.py python -m pytest src/a/c.py\n",
            ],
            &[
                ("open src/x", 9),
                ("goto 12a", 7),
                ("goto \n", 5),
                ("open src/a/b.py\n\n", 16),
                ("search_method 1", 14),
                ("edit 3:4\nend_of_edit\nx", 21),
                ("submit \n", 6),
                ("quit", 0),
            ],
        )?;
        check_forced(
            &g,
            &[
                ("", ""),
                ("g", "oto "),
                ("open ", "src/a/"),
                ("sc", "roll_up\n"),
                ("submit", ""),
                ("submit_", "test src/a/"),
                // A body line may start like the terminator.
                ("edit 3:4\n    x = 1\nend_of_edi", ""),
                (
                    "str_replace src/a/b.py\n<<<<<<< SEARCH\nx\n=======\ny\n>",
                    ">>>>>> REPLACE\n",
                ),
                ("str_replace src/a/c", ".py\n<<<<<<< SEARCH\n"),
                ("view_symbol src/a/b", ".py::"),
            ],
        )?;
        let g = grammar::turn(&aci_like(&files))?;
        check_replies(
            &g,
            &[
                "I should look at the parser first.\n\n```\nopen src/a/b.py\n```",
                "Done.\n\n```\nsubmit\n```",
            ],
            &[
                (" x", 0),
                ("Look `here`", 5),
                ("Done.\n\n```\nsubmit\n``` ", 21),
            ],
        )?;
        check_forced(
            &g,
            &[
                ("Done.\n", "\n```\n"),
                ("Done.\n\n```\nsubmit\n", "```"),
                ("Done.\n\n```\nopen src/a/b.py 3\n", "```"),
            ],
        )?;
        Ok(())
    }

    /// 40 lines of Python-like code, line `n` of file `f`.
    fn python_lines(f: usize) -> Vec<String> {
        (1..=40)
            .map(|n| match n % 8 {
                0 => String::new(),
                1 => format!("def handler_{f}_{n}(request, limit={n}):"),
                2 => format!("    \"\"\"Handle request {n} of file {f}.\"\"\""),
                3 => "    if request.size > limit:".to_string(),
                4 => "        raise ValueError(f\"too big: {request.size}\")".to_string(),
                5 => format!("    result = compute(request, {n})"),
                6 => "    for item in result.items:".to_string(),
                _ => format!("        yield item.value * {f}"),
            })
            .collect()
    }

    fn two_shown_files() -> Vec<ShownFile> {
        (0..2)
            .map(|f| ShownFile {
                path: format!("pkg/module_{f}.py"),
                runs: vec![ShownRun {
                    first: 1,
                    lines: python_lines(f),
                }],
            })
            .collect()
    }

    /// Most stacks; accept mean and max; forced mean and max (µs); parse ms.
    type Costs = (usize, f64, f64, f64, f64, f64);

    /// Per grammar: the most stacks (the anchored grammar keeps one per
    /// shown line that can still be the one copied) at any point of the reply, the mean
    /// and worst cost of `accept` of one token (1-8 characters) and of
    /// `forced(256)` before it, in microseconds.
    fn measure(g: &str, reply: &str) -> Result<Costs, Box<dyn Error>> {
        let started = Instant::now();
        let grammar = Arc::new(Grammar::parse(g)?);
        let parse_ms = started.elapsed().as_secs_f64() * 1e3;
        let sizes = [3, 5, 1, 8, 4, 2, 6, 7];
        let chars: Vec<char> = reply.chars().collect();
        let mut m = Matcher::new(grammar);
        let (mut at, mut k, mut most) = (0, 0, m.states());
        let (mut accept_sum, mut accept_max, mut forced_sum, mut forced_max) =
            (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        while at < chars.len() {
            let end = (at + sizes[k % sizes.len()]).min(chars.len());
            let token: String = chars[at..end].iter().collect();
            let t = Instant::now();
            let forced = m.forced(256);
            let f = t.elapsed().as_secs_f64() * 1e6;
            assert!(
                token.starts_with(&forced) || forced.starts_with(&token),
                "{forced:?} vs {token:?}"
            );
            let t = Instant::now();
            assert!(m.accept(&token), "{token:?} at {at}");
            let a = t.elapsed().as_secs_f64() * 1e6;
            accept_sum += a;
            accept_max = accept_max.max(a);
            forced_sum += f;
            forced_max = forced_max.max(f);
            most = most.max(m.states());
            at = end;
            k += 1;
        }
        assert!(m.can_end(), "{reply:?}");
        let n = k as f64;
        Ok((
            most,
            accept_sum / n,
            accept_max,
            forced_sum / n,
            forced_max,
            parse_ms,
        ))
    }

    #[test]
    fn realistic_grammars_keep_few_stacks_and_cheap_steps() -> TestResult {
        let paths: Vec<String> = (0..20)
            .flat_map(|d| (0..100).map(move |f| format!("pkg/sub{d}/mod{f}.py")))
            .collect();
        let shown = two_shown_files();
        let reasoning = format!(
            "Reasoning: {}\n\n",
            "the limit check uses the wrong bound so big requests pass; "
                .repeat(3)
                .trim_end()
        );
        let targets: Vec<DefinitionTarget> = (1..=40)
            .step_by(8)
            .map(|n| DefinitionTarget {
                label: format!("pkg/module_0.py::handler_0_{n}"),
                indent: String::new(),
                lead: format!("def handler_0_{n}("),
            })
            .collect();
        let cases: Vec<(&str, String, String, usize)> = vec![
            ("choice 2000", grammar::choice(&paths)?, "pkg/sub17/mod42.py".into(), 11),
            (
                "search_replace",
                grammar::search_replace_with_reasoning(&["pkg/module_0.py", "pkg/module_1.py"])?,
                format!("{reasoning}pkg/module_1.py\n<<<<<<< SEARCH\n    if request.size > limit:\n        raise ValueError(f\"too big: {{request.size}}\")\n=======\n    if request.size >= limit:\n        raise ValueError(f\"too big: {{request.size}}\")\n>>>>>>> REPLACE\n"),
                2,
            ),
            (
                "anchored 2x40",
                grammar::anchored(&shown)?,
                format!("{reasoning}pkg/module_1.py\n<<<<<<< SEARCH\n    if request.size > limit:\n        raise ValueError(f\"too big: {{request.size}}\")\n    result = compute(request, 29)\n=======\n    if request.size >= limit:\n        raise ValueError(f\"too big: {{request.size}}\")\n    result = compute(request, 29)\n>>>>>>> REPLACE\n"),
                30,
            ),
            (
                "lines 2x40",
                grammar::lines(&shown)?,
                format!("{reasoning}pkg/module_1.py\nreplace lines 27-28 with:\n```\n    if request.size >= limit:\n        raise ValueError(f\"too big: {{request.size}}\")\n```\n"),
                9,
            ),
            (
                "definition",
                grammar::definition(&targets)?,
                format!("{reasoning}pkg/module_0.py::handler_0_25\n```\ndef handler_0_25(request, limit=25):\n    if request.size >= limit:\n        raise ValueError(\"too big\")\n    return compute(request, 25)\n```\n"),
                5,
            ),
            (
                "turn aci 2000",
                grammar::turn(&aci_like(&paths))?,
                "The limit check is in the handler, so I open that module first.\n\n```\nopen pkg/sub17/mod42.py 120\n```".into(),
                10,
            ),
            (
                "actions str_replace",
                grammar::actions(&aci_like(&paths))?,
                "str_replace pkg/sub3/mod7.py\n<<<<<<< SEARCH\n    if request.size > limit:\n=======\n    if request.size >= limit:\n>>>>>>> REPLACE\n".into(),
                11,
            ),
        ];
        for (name, g, reply, most_states) in cases {
            let (most, accept_mean, accept_max, forced_mean, forced_max, parse_ms) =
                measure(&g, &reply)?;
            eprintln!(
                "{name}: grammar {} bytes parsed in {parse_ms:.1} ms; at most {most} stacks; accept {accept_mean:.1} us mean, {accept_max:.1} max; forced {forced_mean:.1} us mean, {forced_max:.1} max",
                g.len()
            );
            assert_eq!(most, most_states, "{name}");
        }
        Ok(())
    }
}
