//! What both engines do to turn messages into the text they tokenize: the
//! one path of the llama.cpp engine's and the candle engine's `render`.
//! Message content is neutralised against the vocabulary's control-token
//! texts ([`ControlTexts`]); after the chat template, a BOS text the
//! template wrote is dropped where tokenizing adds the BOS token itself
//! ([`without_template_bos`]).

use patchwright_engine_types::Message;

/// The texts of a vocabulary's control tokens (`<|im_end|>`, ...), which
/// message content must not be able to produce; longest first, so a token
/// containing another is broken whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlTexts(Vec<String>);

impl ControlTexts {
    /// The control tokens' texts; one-character texts are left alone (no
    /// marker is one character, and breaking one would touch plain text).
    pub fn new(texts: impl IntoIterator<Item = String>) -> ControlTexts {
        let mut texts: Vec<String> = texts
            .into_iter()
            .filter(|text| text.chars().count() >= 2)
            .collect();
        texts.sort_by_key(|t| std::cmp::Reverse(t.len()));
        ControlTexts(texts)
    }

    /// Message content as the model will read it: any control token's text
    /// (an issue quoting `<|im_end|>`, a repository file with
    /// `<|endoftext|>`) gets a zero-width space after its first character,
    /// so it is read as text and cannot end a turn or forge a role. The
    /// rendered prompt is tokenized with special tokens parsed, because the
    /// template's own markers must be.
    pub fn neutralise(&self, content: &str) -> String {
        let mut out = content.to_string();
        for text in &self.0 {
            if out.contains(text.as_str()) {
                let mut chars = text.chars();
                let first = chars.next().map(String::from).unwrap_or_default();
                out = out.replace(text.as_str(), &format!("{first}\u{200B}{}", chars.as_str()));
            }
        }
        out
    }

    /// `messages` with their content neutralised.
    pub fn messages(&self, messages: &[Message]) -> Vec<Message> {
        messages
            .iter()
            .map(|m| Message {
                role: m.role.clone(),
                content: self.neutralise(&m.content),
            })
            .collect()
    }
}

/// How many of `prompt`'s tokens a cache holding `cached` can keep: their
/// longest common prefix, leaving at least the prompt's last token to
/// evaluate (its logits start the reply). The prefix reuse of the session,
/// the scheduler and the candle engine.
pub fn reusable_prefix<T: PartialEq>(prompt: &[T], cached: &[T]) -> usize {
    prompt
        .iter()
        .zip(cached)
        .take_while(|(a, b)| a == b)
        .count()
        .min(prompt.len().saturating_sub(1))
}

/// `rendered` without the BOS text `bos` it starts with, when tokenizing
/// adds the BOS token (`add_bos`): a template that writes it too would
/// double it.
pub fn without_template_bos(rendered: String, bos: &str, add_bos: bool) -> String {
    match rendered.strip_prefix(bos) {
        Some(rest) if add_bos && !bos.is_empty() => rest.to_string(),
        _ => rendered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_texts_are_broken_longest_first_and_one_character_ones_kept() {
        let control = ControlTexts::new(
            ["<|im_end|>", "<|im_end|>x", "<", "<|endoftext|>"].map(String::from),
        );
        let cases = [
            ("plain text", "plain text"),
            ("a <|im_end|> b", "a <\u{200B}|im_end|> b"),
            ("<|im_end|>x", "<\u{200B}|im_end|>x"),
            ("<|endoftext|><", "<\u{200B}|endoftext|><"),
        ];
        for (content, want) in cases {
            assert_eq!(control.neutralise(content), want, "{content:?}");
        }
    }

    #[test]
    fn the_reusable_prefix_leaves_the_last_prompt_token() {
        let cases: [(&[u8], &[u8], usize); 5] = [
            (b"abcd", b"abxy", 2),
            (b"abcd", b"abcd", 3),
            (b"abcd", b"abcdef", 3),
            (b"abcd", b"", 0),
            (b"", b"abc", 0),
        ];
        for (prompt, cached, want) in cases {
            assert_eq!(
                reusable_prefix(prompt, cached),
                want,
                "{prompt:?} {cached:?}"
            );
        }
    }

    #[test]
    fn a_template_bos_is_dropped_only_where_tokenizing_adds_one() {
        let cases = [
            ("<s>[INST]", "<s>", true, "[INST]"),
            ("<s>[INST]", "<s>", false, "<s>[INST]"),
            ("[INST]", "<s>", true, "[INST]"),
            ("<s>[INST]", "", true, "<s>[INST]"),
        ];
        for (rendered, bos, add, want) in cases {
            assert_eq!(
                without_template_bos(rendered.to_string(), bos, add),
                want,
                "{rendered:?} {bos:?} {add}"
            );
        }
    }
}
