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
    let default = patchwright::models::resolve(&common::models_dir(), "qwen2.5-coder-0.5b")
        .unwrap_or_else(|e| panic!("the default model is missing: {e} (scripts/test fetches it)"));
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
        assert!(
            !without.iter().any(|&id| ours.is_eog(id)),
            "{model}: {without:?}"
        );
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
        assert_eq!(
            im_start.count(),
            5,
            "{model}: four messages and the reply's"
        );
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
        assert!(
            differing.is_empty(),
            "{model}: token bytes differ for {differing:?}"
        );
    }
}

/// Tokens of each observation's filler line in the server test: enough
/// that four turns overflow a 512-token context.
const OBSERVATION_LINES: usize = 12;

/// A ReAct-like conversation with llama.cpp's server at a 512-token
/// context: the history grows past the context; the backend, counting with
/// the GGUF's tokenizer, refuses the overflowing prompt before sending it
/// (`TooLong`), the history is squeezed as the agents squeeze it (old
/// observations collapsed), and every prompt sent fits. The count the
/// backend made for each request equals the server's `usage.prompt_tokens`.
#[test]
fn the_server_backend_squeezes_history_before_the_servers_limit() {
    use patchwright::agents::history::{collapsed, History, HistorySettings, Keep};
    use patchwright::backing::server_backend;
    use patchwright::engine::http::ServerSettings;
    use patchwright::engine::{Backend, EngineError, Request, Sampling};
    use patchwright::models::ModelRef;

    const CONTEXT: u32 = 512;
    let server = crate::http_backend::server_with_context(CONTEXT);
    let settings = ServerSettings {
        context: CONTEXT,
        retries: 0,
        ..ServerSettings::default()
    };
    // A manifest name: its local GGUF gives the tokenizer and template.
    let model =
        ModelRef::resolve(&common::models_dir(), "smollm2-135m", Some(&server.url)).unwrap();
    assert_eq!(model.local, Some(common::test_model()));
    let backend =
        server_backend(&server.url, &model.spec, model.local.as_deref(), &settings).unwrap();
    assert!(backend.has_tokenizer());
    assert_eq!(backend.context(), Some(CONTEXT as usize));
    let reply_tokens = 16;
    let mut conversation = backend.conversation(1, reply_tokens).unwrap();
    assert_eq!(conversation.context_size(), Some(CONTEXT as usize));
    let sampling = Sampling {
        temperature: 0.0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 0,
        max_tokens: reply_tokens as u32,
    };
    let history_settings = HistorySettings {
        keep: Keep::Last(2),
        block: 100,
    };
    let mut history = History::default();
    let mut observations: Vec<String> = Vec::new();
    let (mut sent, mut refused) = (0, 0);
    let mut last_messages = Vec::new();
    for turn in 0..7 {
        observations.push(
            (0..OBSERVATION_LINES)
                .map(|i| format!("{turn}.{i}: def handler_{i}(request): return request.user"))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        history.update(&history_settings, observations.len());
        loop {
            let mut messages = vec![
                Message::system("You explore a repository, one command per reply."),
                Message::user("Find where the user is read. Reply with one command."),
            ];
            for (i, observation) in observations.iter().enumerate() {
                messages.push(Message::assistant(format!("search_dir handler_{i}")));
                messages.push(Message::user(if i < history.collapsed() {
                    collapsed(OBSERVATION_LINES)
                } else {
                    observation.clone()
                }));
            }
            let counted = conversation.count_tokens(&messages).unwrap();
            match conversation.generate(&Request::new(&messages, sampling.clone())) {
                Ok(g) => {
                    assert_eq!(
                        g.stats.prompt_tokens, counted,
                        "turn {turn}: our count vs the server's usage"
                    );
                    assert!(
                        counted + reply_tokens <= CONTEXT as usize,
                        "turn {turn}: {counted}"
                    );
                    sent += 1;
                    last_messages = messages;
                    break;
                }
                Err(EngineError::TooLong {
                    prompt, context, ..
                }) => {
                    assert_eq!((prompt, context), (counted, CONTEXT as usize));
                    refused += 1;
                    assert!(
                        history.squeeze(&history_settings, observations.len()),
                        "turn {turn}: nothing left to squeeze at {counted} tokens"
                    );
                }
                Err(e) => panic!("turn {turn}: {e}"),
            }
        }
    }
    assert_eq!(sent, 7);
    assert!(refused >= 1, "the history never outgrew the context");
    assert!(history.collapsed() >= 1);
    let collapsed_text = collapsed(OBSERVATION_LINES);
    assert!(last_messages.iter().any(|m| m.content == collapsed_text));
}
