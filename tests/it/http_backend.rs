//! The OpenAI-compatible HTTP backend against a real server on loopback:
//! llama.cpp's own server (as the xllamacpp wheel embeds it, started by
//! `tests/fixtures/llama_server.py`), serving the SmolLM2 test model.
//! `scripts/test` installs it and names its interpreter in
//! PATCHWRIGHT_TEST_SERVER_PYTHON.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use patchwright::engine::http::{GrammarField, HttpBackend, ServerKind, ServerSettings};
use patchwright::engine::{grammar, Backend, EngineError, Message, Request, Sampling, Stop};

/// How long the server may take to load the model and start listening.
const STARTUP: Duration = Duration::from_secs(90);

pub struct Server {
    child: Child,
    /// The server's root URL.
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// llama.cpp's server on loopback, serving the test model with a context
/// of `n_ctx` tokens and one slot (llama-server's default).
pub fn server_with_context(n_ctx: u32) -> Server {
    server_with(n_ctx, 1)
}

/// The same with `parallel` slots: with more than one, the server honours
/// `n` up to their number.
pub fn server_with(n_ctx: u32, parallel: u32) -> Server {
    let python = std::env::var("PATCHWRIGHT_TEST_SERVER_PYTHON").unwrap_or_else(|_| {
        panic!("PATCHWRIGHT_TEST_SERVER_PYTHON is not set: scripts/test installs the xllamacpp wheel (llama.cpp's server) and sets it")
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = common::root().join("tests/fixtures/llama_server.py");
    let child = Command::new(&python)
        .arg(&script)
        .arg(common::test_model())
        .args([port.to_string(), n_ctx.to_string(), parallel.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {python} {}: {e}", script.display()));
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    // llama.cpp's server listens before its model is loaded and answers
    // 503 "Loading model" until then: ready is `GET /health` answering 200.
    let started = Instant::now();
    while !healthy(port) {
        assert!(
            started.elapsed() < STARTUP,
            "the server did not become healthy within {STARTUP:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server
}

/// Whether the server on `port` answers `GET /health` with status 200.
fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let mut reply = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut reply).is_ok()
        && reply.starts_with("HTTP/1.1 200")
}

fn ask(text: &str) -> Vec<Message> {
    vec![Message::user(text)]
}

#[test]
fn round_trips_candidates_grammar_and_limits() {
    let server = server_with_context(2048);
    // `auto` recognises llama.cpp's server (`owned_by: "llamacpp"`).
    let backend = HttpBackend::new(&server.url, "smollm2", &ServerSettings::default()).unwrap();
    assert_eq!(backend.dialect().kind, ServerKind::LlamaCpp);
    assert_eq!(backend.dialect().grammar, GrammarField::Grammar);
    assert!(backend.dialect().n);
    let mut conversation = backend.conversation(4, 16).unwrap();

    // Greedy: the same answer twice.
    let msgs = ask("What is the capital of France? Answer in one word.");
    let greedy = Sampling {
        temperature: 0.0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 0,
        max_tokens: 16,
    };
    let a = conversation
        .generate(&Request::new(&msgs, greedy.clone()))
        .unwrap();
    let b = conversation
        .generate(&Request::new(&msgs, greedy.clone()))
        .unwrap();
    assert_eq!(a.candidates[0].text, b.candidates[0].text);
    assert!(
        a.candidates[0].text.contains("Paris"),
        "{:?}",
        a.candidates[0].text
    );
    assert!(a.stats.prompt_tokens > 5);

    // Four candidates under a grammar: every one follows it. With one slot
    // the server refuses `n` = 4 ("Field 'n': Value must be between 1 <=
    // value <= 1"), and the four are asked one per request, each with its
    // own seed and its own exact token count (the answer and the end of
    // generation); with four slots it answers the four in one request.
    let yn = grammar::choice(&["yes", "no"]).unwrap();
    let sampled = Sampling {
        temperature: 1.2,
        top_p: 1.0,
        min_p: 0.0,
        seed: 5,
        max_tokens: 8,
    };
    let msgs = ask("Is the sky blue?");
    let four_slots = server_with(2048, 4);
    let with_n = HttpBackend::new(&four_slots.url, "smollm2", &ServerSettings::default()).unwrap();
    assert!(with_n.dialect().n);
    for (backend, one_each) in [(&backend, true), (&with_n, false)] {
        let g = backend
            .conversation(4, 8)
            .unwrap()
            .generate(&Request {
                n: 4,
                grammar: Some(&yn),
                ..Request::new(&msgs, sampled.clone())
            })
            .unwrap();
        assert_eq!(g.candidates.len(), 4);
        assert!(
            g.candidates
                .iter()
                .all(|c| c.text == "yes" || c.text == "no"),
            "{:?}",
            g.candidates
        );
        assert_eq!(g.stats.generated_tokens.len(), 4);
        if one_each {
            assert_eq!(g.stats.generated_tokens, vec![2, 2, 2, 2]);
        }
    }

    // A prompt larger than the server's context (2048 tokens) is the
    // engine's TooLong, which the agents answer by squeezing history.
    let long = ask(&"word ".repeat(3000));
    match conversation.generate(&Request::new(&long, greedy.clone())) {
        Err(EngineError::TooLong {
            context, reserved, ..
        }) => {
            assert_eq!(context, 2048);
            assert_eq!(reserved, 16);
        }
        other => panic!("expected TooLong, got {:?}", other.map(|g| g.stats)),
    }

    // The token cap is reported as such.
    let msgs = ask("Count from one to one hundred in words.");
    let capped = conversation
        .generate(&Request::new(
            &msgs,
            Sampling {
                max_tokens: 3,
                ..greedy
            },
        ))
        .unwrap();
    assert_eq!(capped.candidates[0].stop, Stop::MaxTokens);
    assert_eq!(capped.stats.generated_tokens, vec![3]);
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let no_retries = ServerSettings {
        retries: 0,
        ..ServerSettings::default()
    };
    // `auto` asks the server what it is, so it fails at once.
    match HttpBackend::new(&format!("http://127.0.0.1:{port}"), "m", &no_retries) {
        Err(EngineError::Http { url, message }) => {
            assert_eq!(url, format!("http://127.0.0.1:{port}/v1/models"));
            assert!(message.contains("is the server running?"), "{message}");
        }
        Err(other) => panic!("expected an HTTP error, got {other}"),
        Ok(_) => panic!("expected an HTTP error, got a backend"),
    }
    // A kind given: the first request fails.
    let backend = HttpBackend::new(
        &format!("http://127.0.0.1:{port}/v1"),
        "m",
        &ServerSettings {
            kind: ServerKind::Openai,
            ..no_retries.clone()
        },
    )
    .unwrap();
    let msgs = ask("hi");
    let err = backend
        .conversation(1, 8)
        .unwrap()
        .generate(&Request::new(&msgs, Sampling::default()));
    match err {
        Err(EngineError::Http { url, message }) => {
            assert_eq!(url, format!("http://127.0.0.1:{port}/v1/chat/completions"));
            assert!(message.contains("is the server running?"), "{message}");
        }
        other => panic!("expected an HTTP error, got {:?}", other.map(|g| g.stats)),
    }
    assert!(
        HttpBackend::new("ftp://example.invalid", "m", &no_retries).is_err(),
        "only http:// and https://"
    );
}
