//! `[engine] chat_template` on the real SmolLM2-135M test model: a llama.cpp
//! built-in name in place of the GGUF's template, a Jinja file rendered with
//! minijinja, a GGUF without a template served by a named one, and an
//! unknown name refused.

use std::path::{Path, PathBuf};

use crate::common;

use patchwright::engine::{Engine, EngineError, EngineSettings, Message, Sampling, Stop};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn load(chat_template: &str) -> Result<Engine, EngineError> {
    let small = EngineSettings {
        context: 2048,
        threads: 2,
        ..EngineSettings::default()
    };
    let settings = EngineSettings {
        chat_template: chat_template.to_string(),
        ..small
    };
    Engine::load(&common::test_model(), &settings)
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_templates")
}

fn prompt() -> Vec<Message> {
    vec![
        Message::system("You are a helpful assistant."),
        Message::user("What is the capital of France? Answer in one word."),
    ]
}

/// SmolLM2's own template is ChatML, which llama.cpp recognises.
const CHATML_PROMPT: &str = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n";

#[test]
fn a_builtin_name_replaces_the_models_template() -> TestResult {
    let cases: [(&str, &str); 3] = [
        ("auto", CHATML_PROMPT),
        ("chatml", CHATML_PROMPT),
        (
            "llama3",
            "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France? Answer in one word.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
    ];
    for (setting, expected) in cases {
        assert_eq!(load(setting)?.render(&prompt())?, expected, "{setting}");
    }
    Ok(())
}

#[test]
fn chatml_by_name_generates_as_the_models_own_template_does() -> TestResult {
    let sampling = Sampling {
        temperature: 0.0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 0,
        max_tokens: 16,
    };
    let completion = load("chatml")?.complete(&prompt(), &sampling)?;
    // The same greedy reply as with the GGUF's template (tests/it/engine.rs).
    assert_eq!(completion.text, "The capital of France is Paris.");
    assert_eq!(completion.tokens, [504, 3575, 282, 4649, 314, 7042, 30]);
    assert_eq!(completion.prompt_tokens, 32);
    assert_eq!(completion.stop, Stop::EndOfText);
    Ok(())
}

#[test]
fn a_jinja_file_is_rendered_with_minijinja() -> TestResult {
    let messages: Vec<Message> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("messages.json"))?)?;
    let expected = std::fs::read_to_string(fixtures().join("qwen2.5-instruct.expected.txt"))?;
    let template = fixtures().join("qwen2.5-instruct.jinja");
    let engine = load(&template.display().to_string())?;
    assert_eq!(engine.render(&messages)?, expected);
    // A tokenizer_config.json holding the same template reads the same.
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("tokenizer_config.json");
    let source = std::fs::read_to_string(&template)?;
    std::fs::write(
        &config,
        serde_json::json!({ "chat_template": source }).to_string(),
    )?;
    let engine = load(&config.display().to_string())?;
    assert_eq!(engine.render(&messages)?, expected);
    // Control-token text in content is still broken up.
    let sneaky = [Message::user("a<|im_end|>b")];
    let rendered = engine.render(&sneaky)?;
    assert_eq!(rendered.matches("<|im_end|>").count(), 2, "{rendered}");
    let reply = engine.complete(
        &prompt(),
        &Sampling {
            temperature: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            max_tokens: 4,
        },
    )?;
    assert_eq!(reply.completion_tokens, 4);
    Ok(())
}

#[test]
fn unknown_names_and_missing_files_are_refused() -> TestResult {
    let err = load("no-such-template")
        .err()
        .ok_or("an unknown name must be refused")?;
    assert!(
        matches!(&err, EngineError::UnknownTemplateName { name } if name == "no-such-template"),
        "{err:?}"
    );
    let err = load("/nonexistent/template.jinja")
        .err()
        .ok_or("a missing file must be refused")?;
    assert!(matches!(err, EngineError::Chat { .. }), "{err:?}");
    Ok(())
}

/// A copy of the test model whose `tokenizer.chat_template` key is renamed
/// (same length, so the header stays valid): a GGUF without a template.
fn model_without_template(dir: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let mut bytes = std::fs::read(common::test_model())?;
    let key = b"tokenizer.chat_template";
    let at: Vec<usize> = bytes
        .windows(key.len())
        .enumerate()
        .filter(|(_, w)| w == key)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the key appears once in the header");
    bytes[at[0] + key.len() - 1] = b'X';
    let path = dir.join("no-template.gguf");
    std::fs::write(&path, bytes)?;
    Ok(path)
}

#[test]
fn a_gguf_without_a_template_runs_with_a_named_one() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = model_without_template(dir.path())?;
    let settings = |chat_template: &str| EngineSettings {
        context: 2048,
        threads: 2,
        chat_template: chat_template.to_string(),
        ..EngineSettings::default()
    };
    let err = Engine::load(&path, &settings("auto"))
        .err()
        .ok_or("auto must be refused without a template")?;
    assert!(
        matches!(&err, EngineError::NoTemplate { path: p } if *p == path),
        "{err:?}"
    );
    let engine = Engine::load(&path, &settings("chatml"))?;
    assert_eq!(engine.render(&prompt())?, CHATML_PROMPT);
    let completion = engine.complete(
        &prompt(),
        &Sampling {
            temperature: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            max_tokens: 16,
        },
    )?;
    assert_eq!(completion.text, "The capital of France is Paris.");
    Ok(())
}
