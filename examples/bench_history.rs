//! History-processing benchmark (run by `scripts/bench-history`; figures go
//! to BENCHMARKS.md). Not a test: it measures, it asserts nothing.
//!
//!   bench_history MODEL.gguf REPO_DIR
//!
//! The same 30-turn episode — fixed commands on the repository at REPO_DIR,
//! so every setting sees the same observations — is fed through one real
//! engine session per history setting. Only the prompt side is measured:
//! each call generates one token, and the scripted reply stands in for the
//! model's. Reported per setting: prompt tokens evaluated and reused, the
//! KV reuse, and the seconds spent evaluating prompts.

use std::path::Path;
use std::time::Instant;

use patchwright::aci::{Aci, AciSettings};
use patchwright::agents::history::{HistorySettings, Keep};
use patchwright::agents::react::{self, Agent, ReactSettings};
use patchwright::engine::{
    Conversation, Engine, EngineError, EngineSettings, Generation, Message, Request, Sampling,
};
use patchwright::index::symbols::CodeIndex;
use patchwright::trajectory::Trajectory;

/// The session of a real engine, answering with scripted replies.
struct Scripted<'e> {
    session: patchwright::engine::Session<'e>,
    replies: Vec<String>,
    next: usize,
    prompt_s: f64,
}

impl Conversation for Scripted<'_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let one = Request::new(
            request.messages,
            Sampling {
                max_tokens: 1,
                ..request.sampling.clone()
            },
        );
        let started = Instant::now();
        let mut generation = self.session.generate(&one)?;
        self.prompt_s += started.elapsed().as_secs_f64();
        generation.candidates[0].text = self.replies[self.next % self.replies.len()].clone();
        self.next += 1;
        Ok(generation)
    }

    fn render(&self, _: &[Message]) -> Option<String> {
        None
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, repo] = args.as_slice() else {
        return Err("usage: bench_history MODEL.gguf REPO_DIR".into());
    };
    let repo = Path::new(repo);
    let engine = Engine::load(
        Path::new(model),
        &EngineSettings {
            context: 8192,
            threads: 0,
            ..Default::default()
        },
    )?;
    let files = patchwright::index::python_files(repo)?;
    let mut replies = Vec::new();
    for (i, f) in files.iter().enumerate() {
        replies.push(format!("I read {f}.\n\n```\nopen {f}\n```"));
        replies.push("I read on.\n\n```\nscroll_down\n```".to_string());
        replies.push(format!(
            "I look at its outline.\n\n```\nview_skeleton {f}\n```"
        ));
        if i % 2 == 0 {
            replies.push("I search for definitions.\n\n```\nsearch_dir def\n```".to_string());
        }
    }
    let settings = [
        ("keep all", Keep::All, 1),
        ("keep 5, collapse each turn (block 1)", Keep::Last(5), 1),
        ("keep 5, collapse in blocks of 5", Keep::Last(5), 5),
    ];
    let base = patchwright::repo::head_commit(repo)?;
    for (name, keep, block) in settings {
        let env = patchwright::env::task::TaskEnv::bare(&patchwright_sandbox::Host::default());
        let mut aci = Aci::new(
            repo,
            &base,
            CodeIndex::build(repo)?,
            AciSettings::default(),
            env,
        );
        let agent = Agent {
            name: "bench",
            role: "You explore a repository.",
            commands: patchwright::aci::command::NAMES,
            demonstration: patchwright::agents::EDIT_DEMONSTRATION,
            task: patchwright::agents::react::TaskText {
                issue: String::new(),
                after: "Read the repository.".to_string(),
            },
        };
        let mut conversation = Scripted {
            session: patchwright::engine::Session::new(&engine, 1, 0)?,
            replies: replies.clone(),
            next: 0,
            prompt_s: 0.0,
        };
        let react = ReactSettings {
            max_steps: 30,
            history: HistorySettings { keep, block },
            ..ReactSettings::default()
        };
        let mut trajectory = Trajectory::new("bench");
        let s = react::run(
            &mut conversation,
            &mut aci,
            &agent,
            &react,
            &Sampling::default(),
            &mut trajectory,
        );
        println!(
            "{name}: {} steps ({}), prompt tokens evaluated {}, reused {}, KV reuse {:.1}%, prompt time {:.1} s",
            s.steps,
            s.status.as_str(),
            s.tokens_evaluated,
            s.tokens_reused,
            100.0 * s.kv_reuse(),
            conversation.prompt_s
        );
    }
    Ok(())
}
