//! A tokenizer without the model: byte-level BPE rebuilt with the
//! `tokenizers` crate from a GGUF's own vocabulary, merges, token types and
//! pre-tokenizer type (or from a Hugging Face `tokenizer.json`), giving the
//! token ids llama.cpp gives for the same text.
//!
//! What makes the ids llama.cpp's, step by step (`llama-vocab.cpp` and
//! `unicode.cpp` in llama.cpp):
//!
//! - Special tokens are split off first, as `tokenizer_st_partition` does:
//!   every control, user-defined and unknown token, longest text first,
//!   each found in the text left over by the longer ones. Control (and
//!   unknown) tokens only when `parse_special`; user-defined ones always.
//! - The text between them is split by the pre-tokenizer type's regexes,
//!   applied in order (each splits the pieces of the one before), the
//!   expressions llama.cpp uses for that type ([`PreTokenizer`]); then each
//!   piece's bytes are mapped to GPT-2's byte-level characters and merged
//!   by rank with the GGUF's merges (`tokenizers`' BPE: lowest rank first,
//!   leftmost on ties, as `llm_tokenizer_bpe_session`).
//! - No BOS is added here: [`GgufTokenizer::add_bos`] says whether the
//!   model wants one, [`GgufTokenizer::bos`] which.
//! - End of generation ([`GgufTokenizer::is_eog`]) is decided as llama.cpp
//!   decides it at load: the EOS, EOT and EOM ids, the FIM pad, repo and
//!   separator tokens, and every token whose text is in llama.cpp's list of
//!   end-of-turn texts ([`EOG_TEXTS`]).
//!
//! `tests/it/tokenizer.rs` checks every one of these against llama.cpp on
//! a corpus of issue texts and code, for SmolLM2 and Qwen2.5-Coder.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use patchwright_engine_types::Message;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::models::ModelWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{DecoderWrapper, SplitDelimiterBehavior, Tokenizer};

use crate::gguf::{self, GgufError};
use crate::setup::{backend, EngineError};

/// GGUF keys read whole for the tokenizer (every other array is only
/// counted by the header reader).
pub const GGUF_ARRAYS: [&str; 3] = [
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
];

/// llama.cpp's default BOS and EOS id for a `gpt2` (BPE) vocabulary whose
/// GGUF names none (`special_bos_id = 11` in `llama_vocab::impl::load`).
pub const BPE_DEFAULT_SPECIAL_ID: u32 = 11;

/// Token texts llama.cpp marks as end of generation whatever the GGUF says
/// (`special_eog_ids`, "this is currently determined based on the token
/// text" in `llama-vocab.cpp`).
pub const EOG_TEXTS: [&str; 22] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Texts llama.cpp takes for the FIM pad, repo and separator tokens when
/// the GGUF does not name them; each is an end-of-generation token.
const FIM_PAD_TEXTS: [&str; 5] = ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: [&str; 5] = [
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: [&str; 1] = ["<|file_sep|>"];

/// Texts llama.cpp reads as end-of-turn (`special_eot_id`) when the GGUF
/// names none; such a token becomes a control token.
const EOT_TEXTS: [&str; 11] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// gpt-oss's tokens llama.cpp always renders (made user-defined at load).
const ALWAYS_USER_DEFINED: [&str; 4] = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// llama.cpp's contractions, case-insensitive without `(?i:)` (its
/// adaptation of the Hugging Face expressions).
const CONTRACTIONS: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

/// GPT-2's pre-tokenizer expression, as llama.cpp writes it.
const GPT2_REGEX: &str =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

/// The pre-tokenizer types this tokenizer knows, by the families llama.cpp
/// gives the same expressions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// Qwen2 (`qwen2`, `deepseek-r1-qwen`, `megrez`, `stablelm2`): single
    /// digits, letters with one leading non-letter, punctuation runs with
    /// their newlines.
    Qwen2,
    /// StarCoder's (`smollm`, `starcoder`, `refact`, `codeshell`): every
    /// digit alone, then GPT-2's expression.
    StarCoder,
    /// GPT-2's (`gpt-2`, `phi-2`).
    Gpt2,
    /// Llama 3's (`llama3`, `llama-v3`, `llama-bpe`): digits in threes;
    /// a piece that is a token whole is not merged (`ignore_merges`), and a
    /// BOS is wanted unless the GGUF says otherwise.
    Llama3,
}

impl PreTokenizer {
    /// The family of `tokenizer.ggml.pre` = `name`, if known here.
    pub fn of(name: &str) -> Option<PreTokenizer> {
        Some(match name {
            "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" => PreTokenizer::Qwen2,
            "smollm" | "starcoder" | "refact" | "codeshell" => PreTokenizer::StarCoder,
            "gpt-2" | "phi-2" => PreTokenizer::Gpt2,
            "llama3" | "llama-v3" | "llama-bpe" => PreTokenizer::Llama3,
            _ => return None,
        })
    }

    /// The names [`PreTokenizer::of`] knows, for error messages.
    pub const KNOWN: &'static str = "qwen2, deepseek-r1-qwen, megrez, stablelm2, smollm, starcoder, refact, codeshell, gpt-2, phi-2, llama3, llama-v3, llama-bpe";

    /// llama.cpp's expressions for this family, applied in order.
    pub fn regexes(self) -> Vec<String> {
        let tail = "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
        match self {
            PreTokenizer::Qwen2 => vec![format!(
                "{CONTRACTIONS}|[^\\r\\n\\p{{L}}\\p{{N}}]?\\p{{L}}+|\\p{{N}}{tail}"
            )],
            PreTokenizer::Llama3 => vec![format!(
                "{CONTRACTIONS}|[^\\r\\n\\p{{L}}\\p{{N}}]?\\p{{L}}+|\\p{{N}}{{1,3}}{tail}"
            )],
            PreTokenizer::StarCoder => vec!["\\p{N}".to_string(), GPT2_REGEX.to_string()],
            PreTokenizer::Gpt2 => vec![GPT2_REGEX.to_string()],
        }
    }

    /// Whether a piece that is a token whole skips merging.
    fn ignore_merges(self) -> bool {
        self == PreTokenizer::Llama3
    }

    /// Whether a BOS is wanted when the GGUF does not say.
    fn default_add_bos(self) -> bool {
        self == PreTokenizer::Llama3
    }
}

/// Why a tokenizer could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot read the tokenizer from the GGUF header: {0}")]
    Gguf(#[from] GgufError),
    #[error("{path}: the GGUF has no {key}, which a tokenizer needs (convert the model again with a current llama.cpp, or give a tokenizer.json)")]
    Missing { path: PathBuf, key: &'static str },
    #[error("{path}: tokenizer.ggml.model = {model:?} is not a byte-level BPE vocabulary (\"gpt2\"); only those can be tokenized without llama.cpp (use the in-process engine for this model, or give a tokenizer.json)")]
    Model { path: PathBuf, model: String },
    #[error("{path}: tokenizer.ggml.pre = {pre:?} is not a pre-tokenizer type this tokenizer knows (known: {known}); give the model's tokenizer.json instead", known = PreTokenizer::KNOWN)]
    Pre { path: PathBuf, pre: String },
    #[error("cannot build the tokenizer of {path}: {message}")]
    Build { path: PathBuf, message: String },
    #[error("{path} is neither a .gguf file nor a tokenizer.json (.json): give one of those")]
    Kind { path: PathBuf },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot tokenize the text: {0}")]
    Encode(String),
    #[error("token id {id} is not in the vocabulary ({size} tokens)")]
    UnknownId { id: u32, size: usize },
}

/// What a token is (llama.cpp's token attributes, from the GGUF's
/// `tokenizer.ggml.token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Ordinary text, stored in byte-level characters.
    Normal,
    /// A control token (`<|im_start|>`): split off only with
    /// `parse_special`.
    Control,
    /// A user-defined token: always split off, stored as plain text.
    UserDefined,
    /// The unknown token: like a control token.
    Unknown,
    /// One raw byte (`<0x0A>`).
    Byte,
    /// Unused or undefined: never produced, decodes to nothing.
    Unused,
}

impl Kind {
    /// GGUF's token type number (`llama_token_type`).
    fn of_gguf(t: i64) -> Kind {
        match t {
            1 => Kind::Normal,
            2 => Kind::Unknown,
            3 => Kind::Control,
            4 => Kind::UserDefined,
            6 => Kind::Byte,
            _ => Kind::Unused,
        }
    }

    /// Whether `tokenizer_st_partition` splits the text at this token.
    fn splits(self, parse_special: bool) -> bool {
        match self {
            Kind::UserDefined => true,
            Kind::Control | Kind::Unknown => parse_special,
            _ => false,
        }
    }
}

/// A byte-level BPE tokenizer giving llama.cpp's ids (see the module
/// documentation).
pub struct GgufTokenizer {
    /// The BPE model and the pre-tokenizer, without added tokens: special
    /// tokens are split off before it sees the text.
    inner: Tokenizer,
    /// Each token's text as stored (byte-level characters for ordinary
    /// tokens, plain text for special ones).
    texts: Vec<String>,
    kinds: Vec<Kind>,
    /// Ids of the tokens that split the text, longest text first.
    specials: Vec<u32>,
    bos: Option<u32>,
    /// The EOS token the vocabulary names (the templates' `eos_token`).
    eos: Option<u32>,
    add_bos: bool,
    eog: BTreeSet<u32>,
    /// GPT-2's byte-level character for each byte, reversed.
    byte_of: HashMap<char, u8>,
}

impl std::fmt::Debug for GgufTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufTokenizer")
            .field("vocab_size", &self.texts.len())
            .field("specials", &self.specials.len())
            .field("bos", &self.bos)
            .field("add_bos", &self.add_bos)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}

/// One piece of a text after the special tokens are split off.
enum Fragment<'a> {
    Text(&'a str),
    Special(u32),
}

/// GPT-2's byte-to-character table: printable Latin-1 bytes stand for
/// themselves, the others (controls, space, DEL, ...) for the characters
/// from U+0100 on, in byte order.
fn byte_level_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 0u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let code = if printable {
            b as u32
        } else {
            next += 1;
            0xFF + next
        };
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    table
}

/// Splits a GGUF merge `"a b"` at its first space after the first byte,
/// as llama.cpp does (`word.find(' ', 1)`).
fn split_merge(merge: &str) -> (String, String) {
    // Byte positions: a space is one byte and never inside a character,
    // so both halves are whole UTF-8.
    let space = merge
        .as_bytes()
        .iter()
        .skip(1)
        .position(|&b| b == b' ')
        .map(|i| i + 1);
    match space {
        Some(i) => (merge[..i].to_string(), merge[i + 1..].to_string()),
        None => (String::new(), String::new()),
    }
}

/// The special ids a vocabulary names, before llama.cpp's text rules.
#[derive(Debug, Default, Clone, Copy)]
struct Named {
    eos: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    fim_pad: Option<u32>,
    fim_rep: Option<u32>,
    fim_sep: Option<u32>,
}

/// llama.cpp's end-of-generation set for `texts` and `kinds` (which it
/// updates: a token found by its text becomes a control token, gpt-oss's
/// always-rendered ones user-defined), given the ids the vocabulary names.
fn end_of_generation(texts: &[String], kinds: &mut [Kind], named: Named) -> BTreeSet<u32> {
    let by_list = |list: &[&str]| -> Option<u32> {
        texts
            .iter()
            .position(|t| list.contains(&t.as_str()))
            .and_then(|i| u32::try_from(i).ok())
    };
    let make_control = |id: u32, kinds: &mut [Kind]| {
        if let Some(k) = kinds.get_mut(id as usize) {
            *k = Kind::Control;
        }
    };
    let eot = named.eot.or_else(|| by_list(&EOT_TEXTS));
    let eom = named.eom.or_else(|| by_list(&["<|eom_id|>"]));
    let fim_pad = named.fim_pad.or_else(|| by_list(&FIM_PAD_TEXTS));
    let fim_rep = named.fim_rep.or_else(|| by_list(&FIM_REP_TEXTS));
    let fim_sep = named.fim_sep.or_else(|| by_list(&FIM_SEP_TEXTS));
    for id in [
        named.eot.is_none().then_some(eot).flatten(),
        named.eom.is_none().then_some(eom).flatten(),
        named.fim_pad.is_none().then_some(fim_pad).flatten(),
        named.fim_rep.is_none().then_some(fim_rep).flatten(),
        named.fim_sep.is_none().then_some(fim_sep).flatten(),
    ]
    .into_iter()
    .flatten()
    {
        make_control(id, kinds);
    }
    let mut eog: BTreeSet<u32> = [fim_pad, fim_rep, fim_sep].into_iter().flatten().collect();
    for (i, text) in texts.iter().enumerate() {
        if EOG_TEXTS.contains(&text.as_str()) {
            let id = u32::try_from(i).unwrap_or(u32::MAX);
            eog.insert(id);
            make_control(id, kinds);
        }
    }
    for (i, text) in texts.iter().enumerate() {
        if ALWAYS_USER_DEFINED.contains(&text.as_str()) {
            kinds[i] = Kind::UserDefined;
        }
    }
    eog.extend([named.eos, eot, eom].into_iter().flatten());
    eog.retain(|&id| (id as usize) < texts.len());
    let text_of = |id: u32| texts[id as usize].as_str();
    let has = |eog: &BTreeSet<u32>, t: &str| eog.iter().find(|&&id| text_of(id) == t).copied();
    // o200k_harmony and solar-open: `<|end|>` ends a message, not the turn.
    if let Some(end) = has(&eog, "<|end|>") {
        let harmony = has(&eog, "<|return|>").is_some() && has(&eog, "<|call|>").is_some();
        let solar = has(&eog, "<|calls|>").is_some() && has(&eog, "<|flush|>").is_some();
        if harmony || solar {
            eog.remove(&end);
            kinds[end as usize] = Kind::UserDefined;
        }
    }
    // gemma4 and plamo: `</s>` is ordinary text.
    if let Some(s) = has(&eog, "</s>") {
        if has(&eog, "<|tool_response>").is_some() || has(&eog, "<|plamo:eos|>").is_some() {
            eog.remove(&s);
            kinds[s as usize] = Kind::Normal;
        }
    }
    eog
}

/// The ids of the tokens that split the text, longest text first (ties in
/// id order).
fn special_ids(texts: &[String], kinds: &[Kind]) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..texts.len())
        .filter(|&i| matches!(kinds[i], Kind::Control | Kind::UserDefined | Kind::Unknown))
        .filter(|&i| !texts[i].is_empty())
        .filter_map(|i| u32::try_from(i).ok())
        .collect();
    ids.sort_by_key(|&id| std::cmp::Reverse(texts[id as usize].len()));
    ids
}

/// The pre-tokenizer: `regexes` in order, each splitting the pieces of the
/// one before (every match its own piece), then the bytes mapped to
/// byte-level characters. `path` is the tokenizer's file, for the error.
fn pre_tokenizer(path: &Path, regexes: &[String]) -> Result<PreTokenizerWrapper, TokenizerError> {
    let mut steps = Vec::new();
    for regex in regexes {
        let split = Split::new(
            SplitPattern::Regex(regex.clone()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| TokenizerError::Build {
            path: path.to_path_buf(),
            message: format!("the expression {regex:?}: {e}"),
        })?;
        steps.push(PreTokenizerWrapper::Split(split));
    }
    steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
        false, false, false,
    )));
    Ok(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
}

impl GgufTokenizer {
    /// The tokenizer of the GGUF file at `path`, from its header: the
    /// vocabulary (`tokenizer.ggml.tokens`), merges, token types,
    /// pre-tokenizer type and special ids. A vocabulary that is not
    /// byte-level BPE, or a pre-tokenizer type not in
    /// [`PreTokenizer::KNOWN`], is refused with its value.
    pub fn from_gguf(path: &Path) -> Result<GgufTokenizer, TokenizerError> {
        let header = gguf::read_header_keeping(path, &GGUF_ARRAYS)?;
        let missing = |key| TokenizerError::Missing {
            path: path.to_path_buf(),
            key,
        };
        let model = header
            .str("tokenizer.ggml.model")
            .ok_or_else(|| missing("tokenizer.ggml.model"))?;
        if model != "gpt2" {
            return Err(TokenizerError::Model {
                path: path.to_path_buf(),
                model: model.to_string(),
            });
        }
        let pre_name = header.str("tokenizer.ggml.pre").unwrap_or("");
        let pre = PreTokenizer::of(pre_name).ok_or_else(|| TokenizerError::Pre {
            path: path.to_path_buf(),
            pre: pre_name.to_string(),
        })?;
        let texts = header
            .strs("tokenizer.ggml.tokens")
            .ok_or_else(|| missing("tokenizer.ggml.tokens"))?
            .to_vec();
        let merges: Vec<(String, String)> = header
            .strs("tokenizer.ggml.merges")
            .ok_or_else(|| missing("tokenizer.ggml.merges"))?
            .iter()
            .map(|m| split_merge(m))
            .collect();
        let mut kinds: Vec<Kind> = match header.ints("tokenizer.ggml.token_type") {
            Some(types) => (0..texts.len())
                .map(|i| types.get(i).map_or(Kind::Normal, |&t| Kind::of_gguf(t)))
                .collect(),
            None => vec![Kind::Normal; texts.len()],
        };
        let size = texts.len();
        let id = |key: &str| -> Option<u32> {
            header
                .int(key)
                .and_then(|v| u32::try_from(v).ok())
                .filter(|&v| (v as usize) < size)
        };
        let bpe_default = Some(BPE_DEFAULT_SPECIAL_ID).filter(|&v| (v as usize) < size);
        let has = |key: &str| header.metadata.contains_key(key);
        let eos = if has("tokenizer.ggml.eos_token_id") {
            id("tokenizer.ggml.eos_token_id")
        } else {
            bpe_default
        };
        let bos = if has("tokenizer.ggml.bos_token_id") {
            id("tokenizer.ggml.bos_token_id")
        } else {
            bpe_default
        };
        let named = Named {
            eos,
            eot: id("tokenizer.ggml.eot_token_id"),
            eom: id("tokenizer.ggml.eom_token_id"),
            fim_pad: id("tokenizer.ggml.fim_pad_token_id"),
            fim_rep: id("tokenizer.ggml.fim_rep_token_id")
                .or_else(|| id("tokenizer.ggml.fim_repo_token_id")),
            fim_sep: id("tokenizer.ggml.fim_sep_token_id"),
        };
        let eog = end_of_generation(&texts, &mut kinds, named);
        let add_bos = header
            .bool("tokenizer.ggml.add_bos_token")
            .unwrap_or(pre.default_add_bos());
        let build_err = |message: String| TokenizerError::Build {
            path: path.to_path_buf(),
            message,
        };
        let vocab: Vocab = texts
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((t.clone(), u32::try_from(i).ok()?)))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(pre.ignore_merges())
            .build()
            .map_err(|e| build_err(format!("the BPE model: {e}")))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer(path, &pre.regexes())?));
        Ok(GgufTokenizer::assemble(
            inner,
            texts,
            kinds,
            (bos, eos),
            add_bos,
            eog,
        ))
    }

    /// A tokenizer from `path`: a `.gguf` file ([`GgufTokenizer::from_gguf`])
    /// or a Hugging Face `tokenizer.json` (any other `.json`), chosen by the
    /// extension.
    ///
    /// A `tokenizer.json` must be byte-level BPE (a `BPE` model and a
    /// `ByteLevel` decoder); its added tokens split the text like llama.cpp's
    /// special tokens (`special: true` ones as control tokens, the others as
    /// user-defined). The BOS token and `add_bos_token` come from a
    /// `tokenizer_config.json` beside it, when there is one.
    pub fn from_file(path: &Path) -> Result<GgufTokenizer, TokenizerError> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gguf") => GgufTokenizer::from_gguf(path),
            Some("json") => GgufTokenizer::from_json(path),
            _ => Err(TokenizerError::Kind {
                path: path.to_path_buf(),
            }),
        }
    }

    /// A Hugging Face `tokenizer.json` (see [`GgufTokenizer::from_file`]).
    fn from_json(path: &Path) -> Result<GgufTokenizer, TokenizerError> {
        let build_err = |message: String| TokenizerError::Build {
            path: path.to_path_buf(),
            message,
        };
        let full = Tokenizer::from_file(path).map_err(|e| build_err(e.to_string()))?;
        let ModelWrapper::BPE(bpe) = full.get_model() else {
            return Err(build_err(
                "its model is not BPE: only byte-level BPE tokenizers are supported".into(),
            ));
        };
        if !matches!(full.get_decoder(), Some(DecoderWrapper::ByteLevel(_))) {
            return Err(build_err(
                "its decoder is not ByteLevel: only byte-level BPE tokenizers are supported".into(),
            ));
        }
        let size = full.get_vocab_size(true);
        let mut texts = vec![String::new(); size];
        let mut kinds = vec![Kind::Unused; size];
        for (text, id) in full.get_vocab(false) {
            if let Some(slot) = texts.get_mut(id as usize) {
                *slot = text;
                kinds[id as usize] = Kind::Normal;
            }
        }
        for (id, added) in full.get_added_tokens_decoder() {
            if let Some(slot) = texts.get_mut(id as usize) {
                *slot = added.content.clone();
                kinds[id as usize] = if added.special {
                    Kind::Control
                } else {
                    Kind::UserDefined
                };
            }
        }
        let config = read_tokenizer_config(&path.with_file_name("tokenizer_config.json"))?;
        let find = |text: &Option<String>| {
            text.as_deref()
                .and_then(|t| texts.iter().position(|x| x == t))
                .and_then(|i| u32::try_from(i).ok())
        };
        let (bos, eos) = (find(&config.bos), find(&config.eos));
        let named = Named {
            eos,
            ..Named::default()
        };
        let eog = end_of_generation(&texts, &mut kinds, named);
        let mut inner = Tokenizer::new(bpe.clone());
        inner
            .with_normalizer(full.get_normalizer().cloned())
            .map_err(|e| build_err(e.to_string()))?;
        inner.with_pre_tokenizer(full.get_pre_tokenizer().cloned());
        Ok(GgufTokenizer::assemble(
            inner,
            texts,
            kinds,
            (bos, eos),
            config.add_bos.unwrap_or(false),
            eog,
        ))
    }

    fn assemble(
        inner: Tokenizer,
        texts: Vec<String>,
        kinds: Vec<Kind>,
        (bos, eos): (Option<u32>, Option<u32>),
        add_bos: bool,
        eog: BTreeSet<u32>,
    ) -> GgufTokenizer {
        let specials = special_ids(&texts, &kinds);
        let byte_of = byte_level_chars()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        GgufTokenizer {
            inner,
            texts,
            kinds,
            specials,
            bos,
            eos,
            add_bos,
            eog,
            byte_of,
        }
    }

    /// `text` split at the special tokens, as llama.cpp's
    /// `tokenizer_st_partition`: each token in turn (longest first) found in
    /// every piece of text the longer ones left.
    fn partition<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let mut fragments = vec![Fragment::Text(text)];
        for &id in &self.specials {
            if !self.kinds[id as usize].splits(parse_special) {
                continue;
            }
            let needle = self.texts[id as usize].as_str();
            let mut next = Vec::with_capacity(fragments.len());
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    next.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(needle) {
                    if at > 0 {
                        next.push(Fragment::Text(&rest[..at]));
                    }
                    next.push(Fragment::Special(id));
                    rest = &rest[at + needle.len()..];
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }

    /// The token ids of `text`, without a BOS. With `parse_special`, the
    /// text of a control token (`<|im_start|>`) becomes that token, as
    /// llama.cpp's `tokenize(.., parse_special = true)`; without, it is
    /// tokenized as text. User-defined tokens are always recognised.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::new();
        for fragment in self.partition(text, parse_special) {
            match fragment {
                Fragment::Special(id) => ids.push(id),
                Fragment::Text(t) => {
                    let encoding = self
                        .inner
                        .encode_fast(t, false)
                        .map_err(|e| TokenizerError::Encode(e.to_string()))?;
                    ids.extend_from_slice(encoding.get_ids());
                }
            }
        }
        Ok(ids)
    }

    /// The text of `ids`: each token's bytes ([`GgufTokenizer::token_bytes`],
    /// special tokens as their text) joined, invalid UTF-8 (a character cut
    /// between tokens) replaced by U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut bytes = Vec::new();
        for &id in ids {
            let piece = self.token_bytes(id).ok_or(TokenizerError::UnknownId {
                id,
                size: self.texts.len(),
            })?;
            bytes.extend(piece);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The bytes of token `id`'s piece, as llama.cpp's `token_to_piece`
    /// with special tokens rendered (what its grammar matches a token
    /// against): an ordinary token's byte-level characters decoded to
    /// bytes, a control or user-defined token's text, nothing for an unused
    /// one. `None` for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        let text = self.texts.get(id as usize)?;
        Some(match self.kinds[id as usize] {
            Kind::Control | Kind::UserDefined | Kind::Unknown => text.as_bytes().to_vec(),
            Kind::Normal => {
                let mut out = Vec::with_capacity(text.len());
                for c in text.chars() {
                    match self.byte_of.get(&c) {
                        Some(&b) => out.push(b),
                        None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                out
            }
            Kind::Byte => byte_token(text).map_or_else(Vec::new, |b| vec![b]),
            Kind::Unused => Vec::new(),
        })
    }

    /// The BOS token (`tokenizer.ggml.bos_token_id`), if the vocabulary has
    /// one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// Whether the model wants a BOS before a prompt
    /// (`tokenizer.ggml.add_bos_token`).
    pub fn add_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Whether `id` ends generation, as llama.cpp decides (see the module
    /// documentation).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// Tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    /// The EOS token the vocabulary names (`tokenizer.ggml.eos_token_id`).
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The stored text of token `id` (byte-level characters for an
    /// ordinary token); `None` outside the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }
}

/// The byte of a byte token's text `<0xAB>`.
fn byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

/// What a `tokenizer_config.json` says about BOS and EOS.
#[derive(Debug, Default)]
struct TokenizerConfig {
    bos: Option<String>,
    eos: Option<String>,
    add_bos: Option<bool>,
}

/// The BOS and EOS texts and `add_bos_token` of the `tokenizer_config.json`
/// at `path`; all unknown when there is no such file.
fn read_tokenizer_config(path: &Path) -> Result<TokenizerConfig, TokenizerError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TokenizerConfig::default()),
        Err(source) => {
            return Err(TokenizerError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| TokenizerError::Build {
            path: path.to_path_buf(),
            message: format!("not JSON: {e}"),
        })?;
    // A token is a string or an AddedToken object with `content`.
    let token = |key: &str| match json.get(key) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(v) => v.get("content").and_then(|c| c.as_str()).map(String::from),
        None => None,
    };
    Ok(TokenizerConfig {
        bos: token("bos_token"),
        eos: token("eos_token"),
        add_bos: json.get("add_bos_token").and_then(|v| v.as_bool()),
    })
}

/// A prompt's tokens as a server evaluates it: messages rendered with the
/// model's Jinja chat template ([`super::chat`]), then tokenized with
/// special tokens parsed, a BOS first when the model wants one and the
/// template did not write it (llama.cpp's server; llama-cpp-python's
/// Jinja formatter never adds one, which differs only for a model that
/// wants a BOS its template leaves out).
pub struct ChatTokenizer {
    tokenizer: GgufTokenizer,
    template: super::chat::JinjaTemplate,
    bos_text: String,
}

impl std::fmt::Debug for ChatTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTokenizer")
            .field("tokenizer", &self.tokenizer)
            .finish_non_exhaustive()
    }
}

impl ChatTokenizer {
    /// The tokenizer and chat template of `path`: a GGUF's
    /// `tokenizer.chat_template`, or for a `tokenizer.json` the
    /// `chat_template` of the `tokenizer_config.json` beside it.
    pub fn from_file(path: &Path) -> Result<ChatTokenizer, TokenizerError> {
        let tokenizer = GgufTokenizer::from_file(path)?;
        let source = if path.extension().and_then(|e| e.to_str()) == Some("gguf") {
            gguf::read_header(path)?
                .str("tokenizer.chat_template")
                .map(str::to_string)
                .ok_or_else(|| TokenizerError::Missing {
                    path: path.to_path_buf(),
                    key: "tokenizer.chat_template",
                })?
        } else {
            super::chat::read_template_file(&path.with_file_name("tokenizer_config.json")).map_err(
                |e| TokenizerError::Build {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                },
            )?
        };
        let text = |id: Option<u32>| {
            id.and_then(|id| tokenizer.token_text(id))
                .unwrap_or("")
                .to_string()
        };
        let eos = tokenizer.eos();
        let bos_text = text(tokenizer.bos());
        let template =
            super::chat::JinjaTemplate::new(&source, &bos_text, &text(eos)).map_err(|e| {
                TokenizerError::Build {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                }
            })?;
        Ok(ChatTokenizer {
            tokenizer,
            template,
            bos_text,
        })
    }

    /// `messages` rendered with the chat template, ready for the reply.
    pub fn render(&self, messages: &[Message]) -> Result<String, TokenizerError> {
        self.template
            .render(messages)
            .map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// The token ids of `messages` as the server evaluates them.
    pub fn tokens(&self, messages: &[Message]) -> Result<Vec<u32>, TokenizerError> {
        let rendered = self.render(messages)?;
        let mut ids = Vec::new();
        if let Some(bos) = self.tokenizer.bos() {
            if self.tokenizer.add_bos()
                && (self.bos_text.is_empty() || !rendered.starts_with(&self.bos_text))
            {
                ids.push(bos);
            }
        }
        ids.extend(self.tokenizer.encode(&rendered, true)?);
        Ok(ids)
    }

    /// The tokenizer itself.
    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.tokenizer
    }
}

/// llama.cpp's own tokenizer for a GGUF, loaded vocabulary-only (no
/// weights, a fraction of a second): what [`GgufTokenizer`] is checked
/// against, and a way to tokenize exactly as llama.cpp does without a model
/// loaded for inference.
pub struct LlamaTokenizer {
    model: llama_cpp_2::model::LlamaModel,
}

impl LlamaTokenizer {
    /// Loads the vocabulary of the GGUF file at `path`.
    pub fn load(path: &Path) -> Result<LlamaTokenizer, EngineError> {
        let params = llama_cpp_2::model::params::LlamaModelParams::default()
            .with_vocab_only(true)
            .with_n_gpu_layers(0);
        let model = llama_cpp_2::model::LlamaModel::load_from_file(backend()?, path, &params)
            .map_err(|e| EngineError::Load {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        Ok(LlamaTokenizer { model })
    }

    /// llama.cpp's `tokenize(text, add_special = false, parse_special)`.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), false, parse_special)
            .into_iter()
            .map(|t| u32::try_from(t.0).unwrap_or(u32::MAX))
            .collect()
    }

    /// llama.cpp's `token_to_piece(id, special = true)`.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let token = llama_cpp_2::token::LlamaToken(i32::try_from(id).unwrap_or(i32::MAX));
        self.model.vocab().token_to_piece(token, true, None)
    }

    /// llama.cpp's `is_eog`.
    pub fn is_eog(&self, id: u32) -> bool {
        let token = llama_cpp_2::token::LlamaToken(i32::try_from(id).unwrap_or(i32::MAX));
        self.model.vocab().is_eog(token)
    }

    /// The BOS id, if the vocabulary has one.
    pub fn bos(&self) -> Option<u32> {
        u32::try_from(self.model.vocab().bos().0).ok()
    }

    /// Whether llama.cpp adds a BOS.
    pub fn add_bos(&self) -> bool {
        self.model.vocab().should_add_bos()
    }

    /// Tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        usize::try_from(self.model.n_vocab()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_is_gpt2s() {
        let table = byte_level_chars();
        // Printable bytes stand for themselves; the space is the 33rd
        // remapped byte (0x00..=0x20), U+0120 'Ġ'; newline U+010A 'Ċ'.
        let cases = [
            (b'a', 'a'),
            (b' ', 'Ġ'),
            (b'\n', 'Ċ'),
            (0x00, 'Ā'),
            (0x7F, 'ġ'),
            (0xAD, 'Ń'),
            (0xFF, 'ÿ'),
        ];
        for (byte, want) in cases {
            assert_eq!(table[byte as usize], want, "byte {byte:#x}");
        }
        let distinct: BTreeSet<char> = table.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn merges_split_at_the_first_space_after_the_first_byte() {
        let cases = [
            ("Ġ t", ("Ġ", "t")),
            ("a b", ("a", "b")),
            ("  ", (" ", "")),
            ("ab cd ef", ("ab", "cd ef")),
            ("nospace", ("", "")),
        ];
        for (merge, (a, b)) in cases {
            assert_eq!(
                split_merge(merge),
                (a.to_string(), b.to_string()),
                "{merge:?}"
            );
        }
    }

    #[test]
    fn pre_tokenizer_names_map_to_families() {
        let cases = [
            ("qwen2", Some(PreTokenizer::Qwen2)),
            ("smollm", Some(PreTokenizer::StarCoder)),
            ("gpt-2", Some(PreTokenizer::Gpt2)),
            ("llama-bpe", Some(PreTokenizer::Llama3)),
            ("default", None),
            ("", None),
            ("tekken", None),
        ];
        for (name, want) in cases {
            assert_eq!(PreTokenizer::of(name), want, "{name}");
        }
        for family in [
            PreTokenizer::Qwen2,
            PreTokenizer::StarCoder,
            PreTokenizer::Gpt2,
            PreTokenizer::Llama3,
        ] {
            assert!(
                pre_tokenizer(Path::new("t.gguf"), &family.regexes()).is_ok(),
                "{family:?}"
            );
        }
    }

    /// A GGUF holding a tiny byte-level vocabulary: `a`, `b`, `ab`, `Ġ`,
    /// `Ġab`, a control `<|im_end|>`, a user-defined `<tool>` and the
    /// digits, with `extra` entries after them.
    fn tiny_gguf(path: &Path, extra: &[(&str, gguf::Meta<'_>)]) {
        use gguf::Meta::{I32s, Str, Strs, U32};
        let tokens = ["a", "b", "ab", "Ġ", "Ġab", "<|im_end|>", "<tool>", "1", "2"];
        let types = [1, 1, 1, 1, 1, 3, 4, 1, 1];
        let mut entries = vec![
            ("tokenizer.ggml.model", Str("gpt2")),
            ("tokenizer.ggml.pre", Str("qwen2")),
            ("tokenizer.ggml.tokens", Strs(&tokens)),
            ("tokenizer.ggml.merges", Strs(&["a b", "Ġ ab"])),
            ("tokenizer.ggml.token_type", I32s(&types)),
            ("tokenizer.ggml.eos_token_id", U32(5)),
        ];
        for (key, value) in extra {
            let value = match value {
                gguf::Meta::Str(s) => Str(s),
                gguf::Meta::U32(v) => U32(*v),
                _ => continue,
            };
            entries.retain(|(k, _)| k != key);
            entries.push((key, value));
        }
        std::fs::write(path, gguf::header(&entries)).unwrap();
    }

    #[test]
    fn a_tiny_vocabulary_encodes_as_llama_cpp_would() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("tiny.gguf");
        tiny_gguf(&path, &[]);
        let t = GgufTokenizer::from_gguf(&path)?;
        #[rustfmt::skip]
        let cases: [(&str, bool, Vec<u32>); 7] = [
            ("ab", false, vec![2]),
            (" ab", false, vec![4]),
            ("abab ab", false, vec![2, 2, 4]),
            // Qwen2 splits digits one by one.
            ("12", false, vec![7, 8]),
            // A control token is text without parse_special ...
            ("ab<|im_end|>", true, vec![2, 5]),
            // ... a user-defined one is split off always.
            ("<tool>ab", false, vec![6, 2]),
            ("", true, vec![]),
        ];
        for (text, special, want) in cases {
            assert_eq!(
                t.encode(text, special)?,
                want,
                "{text:?} parse_special={special}"
            );
        }
        assert_eq!(t.decode(&[4, 5, 6])?, " ab<|im_end|><tool>");
        assert_eq!(t.token_bytes(3), Some(b" ".to_vec()));
        assert_eq!(t.token_bytes(99), None);
        assert!(t.decode(&[99]).is_err());
        assert_eq!(t.vocab_size(), 9);
        // No BOS in the file: llama.cpp's default id 11 is outside this
        // vocabulary, so none.
        assert_eq!((t.bos(), t.add_bos()), (None, false));
        let eog: Vec<u32> = (0..9).filter(|&id| t.is_eog(id)).collect();
        assert_eq!(eog, vec![5]);
        Ok(())
    }

    #[test]
    fn vocabularies_it_cannot_tokenize_are_refused_by_name(
    ) -> Result<(), Box<dyn std::error::Error>> {
        use gguf::Meta::Str;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("m.gguf");
        let cases = [
            (
                ("tokenizer.ggml.model", Str("llama")),
                "tokenizer.ggml.model = \"llama\" is not a byte-level BPE vocabulary",
            ),
            (
                ("tokenizer.ggml.pre", Str("tekken")),
                "tokenizer.ggml.pre = \"tekken\" is not a pre-tokenizer type this tokenizer knows",
            ),
            (
                ("tokenizer.ggml.pre", Str("")),
                "tokenizer.ggml.pre = \"\" is not a pre-tokenizer type",
            ),
        ];
        for (entry, want) in cases {
            tiny_gguf(&path, &[entry]);
            let err = GgufTokenizer::from_gguf(&path)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want) && err.contains("m.gguf"), "{err}");
        }
        let err = GgufTokenizer::from_file(&dir.path().join("vocab.txt"))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("vocab.txt is neither a .gguf file nor a tokenizer.json"),
            "{err}"
        );
        Ok(())
    }
}
