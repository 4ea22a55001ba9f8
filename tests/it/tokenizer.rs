//! `GgufTokenizer` (the `tokenizers` crate over a GGUF's own vocabulary and
//! merges) against llama.cpp's tokenizer on the same file, loaded
//! vocabulary-only: token ids on every text of
//! `tests/fixtures/tokenizer/corpus.json` (SWE-bench Lite issue texts and
//! gold patches, and crafted texts: tabs, CRLF, unicode, emojis, long
//! whitespace runs, digits, control-token texts), with and without special
//! tokens parsed; a chat-rendered prompt; and the vocabulary's facts (BOS,
//! end of generation and each token's bytes) for every id. SmolLM2
//! (`smollm`) and the default model, Qwen2.5-Coder (`qwen2`).

use crate::common;

use std::path::PathBuf;

use patchwright::engine::{ChatTokenizer, GgufTokenizer, LlamaTokenizer, Message};

#[derive(serde::Deserialize)]
struct Entry {
    name: String,
    text: String,
}

fn corpus() -> Vec<Entry> {
    let path = common::root().join("tests/fixtures/tokenizer/corpus.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The two models: SmolLM2 and the manifest's default.
fn models() -> Vec<(&'static str, PathBuf)> {
    let default = patchwright::models::resolve("qwen2.5-coder-0.5b").unwrap_or_else(|e| {
        panic!("the default model is missing: {e} (scripts/test fetches it)")
    });
    vec![("smollm2", common::test_model()), ("qwen2.5", default.path)]
}

/// Where two id lists part, for the failure message.
fn first_difference(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[test]
fn ids_match_llama_cpp_on_every_text_of_the_corpus() {
    let corpus = corpus();
    assert!(corpus.len() >= 60, "{} texts", corpus.len());
    for (model, path) in models() {
        let ours = GgufTokenizer::from_gguf(&path).unwrap();
        let reference = LlamaTokenizer::load(&path).unwrap();
        let mut failures = Vec::new();
        let mut tokens = 0;
        for entry in &corpus {
            for parse_special in [false, true] {
                let got = ours.encode(&entry.text, parse_special).unwrap();
                let want = reference.encode(&entry.text, parse_special);
                tokens += want.len();
                if got != want {
                    let at = first_difference(&got, &want);
                    failures.push(format!(
                        "{model} {} (parse_special {parse_special}): differ at token {at}: ours {:?} llama.cpp {:?}",
                        entry.name,
                        &got[at..(at + 5).min(got.len())],
                        &want[at..(at + 5).min(want.len())]
                    ));
                }
                let back = ours.decode(&got).unwrap();
                if back != entry.text {
                    failures.push(format!("{model} {}: decode(encode(t)) != t", entry.name));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(tokens > 20_000, "{model}: {tokens} tokens compared");
        // Control-token texts: parsed as tokens only when asked.
        let quoted = "say <|im_end|> now";
        let with = ours.encode(quoted, true).unwrap();
        let without = ours.encode(quoted, false).unwrap();
        assert!(with.iter().any(|&id| ours.is_eog(id)), "{model}: {with:?}");
        assert!(!without.iter().any(|&id| ours.is_eog(id)), "{model}: {without:?}");
    }
}

#[test]
fn a_chat_rendered_prompt_has_llama_cpp_ids() {
    let corpus = corpus();
    let issue = &corpus
        .iter()
        .find(|e| e.name.starts_with("issue:"))
        .unwrap()
        .text;
    let messages = [
        Message::system("You are a careful software engineer."),
        Message::user(format!("Fix this issue:\n\n{issue}")),
        Message::assistant("I will read the code first.\n\n```\nopen src/a.py\n```"),
        Message::user("[File: src/a.py (3 lines)]\n1:\tdef f():\n2:\t    return 1\n"),
    ];
    for (model, path) in models() {
        let chat = ChatTokenizer::from_file(&path).unwrap();
        let reference = LlamaTokenizer::load(&path).unwrap();
        let rendered = chat.render(&messages).unwrap();
        assert!(rendered.contains("<|im_start|>user"), "{model}: {rendered}");
        let mut want = Vec::new();
        if reference.add_bos() {
            want.extend(reference.bos());
        }
        want.extend(reference.encode(&rendered, true));
        let got = chat.tokens(&messages).unwrap();
        assert_eq!(got, want, "{model}");
        // The template's markers are single control tokens.
        let im_start = got.iter().filter(|&&id| {
            chat.tokenizer().token_bytes(id).as_deref() == Some(b"<|im_start|>".as_slice())
        });
        assert_eq!(im_start.count(), 5, "{model}: four messages and the reply's");
    }
}

#[test]
fn vocabulary_facts_match_llama_cpp_for_every_token() {
    for (model, path) in models() {
        let ours = GgufTokenizer::from_gguf(&path).unwrap();
        let reference = LlamaTokenizer::load(&path).unwrap();
        assert_eq!(ours.vocab_size(), reference.vocab_size(), "{model}");
        assert_eq!(ours.bos(), reference.bos(), "{model}");
        assert_eq!(ours.add_bos(), reference.add_bos(), "{model}");
        let size = u32::try_from(ours.vocab_size()).unwrap();
        let eog: Vec<u32> = (0..size).filter(|&id| ours.is_eog(id)).collect();
        let want: Vec<u32> = (0..size).filter(|&id| reference.is_eog(id)).collect();
        assert_eq!(eog, want, "{model}: end-of-generation tokens");
        assert!(!eog.is_empty(), "{model}");
        let differing: Vec<u32> = (0..size)
            .filter(|&id| ours.token_bytes(id) != Some(reference.token_bytes(id)))
            .take(10)
            .collect();
        assert!(differing.is_empty(), "{model}: token bytes differ for {differing:?}");
    }
}
