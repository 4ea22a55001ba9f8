//! A check of the MASAI pipeline's test machinery on a task, with a
//! scripted model that knows the answer: the Edit Localizer records the
//! functions the gold patch changes, the Issue Reproducer answers with the
//! task's own test file as its test patch leaves it (the FAIL_TO_PASS
//! tests in it) — in sample mode, the default, as its one candidate, which
//! becomes a new test file beside the located code's tests; in ReAct mode
//! (when the test patch adds files beside the test, which only an agent
//! can create) by writing and handing it in — and the Fixer offers a wrong
//! patch and the gold patch. In the task's own environment the Reproducer
//! must accept the test (it fails on the base commit inside a test's body)
//! and the Ranker must put the gold patch first. Like the stage metrics, this reads the answer: it checks
//! the machinery, it is never a result.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::masai::{self, Dirs};
use super::metrics;
use crate::agents::reproduce::{ReproducerMode, SampleStatus};
use crate::config::Settings;
use crate::dataset::Task;
use crate::engine::{
    Backend, Candidate, Conversation, EngineError, Generation, Request, Stats, Stop,
};
use crate::env::task::TaskEnv;
use crate::eval::pool::Pool;
use crate::index::symbols;
use crate::record::result::EnvironmentUsed;
use crate::record::trajectory::Step;
use crate::repo::{Repos, Workspace};
use crate::trajectory::Trajectory;

/// A test command's limit in the check: whole test files of large
/// repositories (Django's, sympy's) take minutes.
pub const CHECK_TEST_TIMEOUT_S: u64 = 900;

/// The comment the wrong candidate adds: it applies, parses, and fixes
/// nothing.
pub const WRONG_LINE: &str = "# patchwright check: a change that fixes nothing";

/// What the check found for one task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckRow {
    pub instance_id: String,
    pub repo: String,
    pub version: String,
    pub environment: Option<EnvironmentUsed>,
    /// The task's test file the reproduction is made of.
    pub test_file: Option<String>,
    /// How the Reproducer ran (`sample`, `react`).
    #[serde(default)]
    pub reproducer_mode: Option<ReproducerMode>,
    /// The accepted test's path and command.
    #[serde(default)]
    pub reproduction_path: Option<String>,
    #[serde(default)]
    pub reproduction_command: Option<String>,
    /// The Reproducer accepted it.
    pub reproduction_accepted: bool,
    /// ReAct mode: `submit_test`'s last observation; sample mode: the
    /// candidate's status and why (why it was not accepted).
    pub reproducer_said: String,
    /// The Ranker's order, by name (`gold`, `wrong`).
    pub order: Vec<String>,
    /// The reproduction test with each candidate (`gold`, `wrong`).
    pub reproduction_with_gold: Option<bool>,
    pub reproduction_with_wrong: Option<bool>,
    /// The gold patch came first.
    pub gold_first: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub seconds: f64,
}

/// Why a task cannot be checked.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("the test patch changes no Python test file")]
    NoTestFile,
    #[error("the gold patch {0}: SEARCH/REPLACE blocks cannot write it")]
    Unscriptable(String),
    #[error(transparent)]
    Repo(#[from] crate::repo::RepoError),
    #[error(transparent)]
    Masai(#[from] masai::MasaiError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

/// Checks `task` (see the module's documentation); `scratch` is emptied
/// and used for its worktrees.
pub fn check(task: &Task, repos: &Repos, pool: &Pool<'_>, scratch: &Path) -> CheckRow {
    let started = Instant::now();
    let mut row = CheckRow {
        instance_id: task.instance_id.clone(),
        repo: task.repo.clone(),
        version: task.version.clone(),
        ..CheckRow::default()
    };
    let _ = std::fs::remove_dir_all(scratch);
    if let Err(e) = run_check(task, repos, pool, scratch, &mut row) {
        row.error = Some(e.to_string());
    }
    let _ = std::fs::remove_dir_all(scratch);
    row.seconds = started.elapsed().as_secs_f64();
    row
}

fn run_check(
    task: &Task,
    repos: &Repos,
    pool: &Pool<'_>,
    scratch: &Path,
    row: &mut CheckRow,
) -> Result<(), CheckError> {
    let source = repos.locate(&task.repo)?;
    let ws = Workspace::create(&source, &task.base_commit, &scratch.join("ws"))?;
    let answer = Answer::read(task, &ws, scratch, row)?;
    let env = task_env(task, pool, &ws, scratch, row);
    let mode = answer.reproducer_mode();
    let model = answer.model(mode, row);
    let settings = answer.settings(mode);
    let mut trajectory = Trajectory::new(&task.instance_id);
    let outcome = masai::run(
        &model,
        &settings,
        &task.issue(),
        &ws,
        &env,
        &Dirs {
            artifacts: scratch.join("artifacts"),
            scratch: scratch.join("candidates"),
            shared: None,
        },
        &mut trajectory,
    )?;
    record_reproduction(row, mode, &outcome, &trajectory);
    record_ranking(row, &outcome);
    if answer.located.is_empty() {
        row.error = Some("the gold patch changes no function or class".into());
    }
    Ok(())
}

/// What the scripted model knows: the task's answer, read from its
/// patches and its base commit.
struct Answer {
    /// The task's test file the reproduction is made of.
    test_file: String,
    /// The test file as the test patch leaves it.
    test_text: String,
    /// The files the test patch adds beside it (path, text).
    added: Vec<(String, String)>,
    /// The test file's lines at the base commit (0 when it is new).
    base_lines: usize,
    /// The gold patch as SEARCH/REPLACE blocks, and the wrong one.
    gold: String,
    wrong: String,
    /// What the localizer records, and the gold functions.
    locate: Vec<(String, String)>,
    located: Vec<String>,
}

impl Answer {
    /// Reads the answer of `task` from `ws` (its base commit); the test
    /// file goes into `row`.
    fn read(
        task: &Task,
        ws: &Workspace,
        scratch: &Path,
        row: &mut CheckRow,
    ) -> Result<Answer, CheckError> {
        let test_file = reproduction_file(task).ok_or(CheckError::NoTestFile)?;
        row.test_file = Some(test_file.clone());
        let (test_text, added) = test_patched(task, ws, scratch, &test_file)?;
        let base_lines = crate::aci::read_text(ws.path(), &test_file)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        let gold = search_replace(&task.patch, None)?;
        let wrong = search_replace(&task.patch, Some(WRONG_LINE))?;
        let (locate, located) = locations(ws.path(), &task.patch);
        Ok(Answer {
            test_file,
            test_text,
            added,
            base_lines,
            gold,
            wrong,
            locate,
            located,
        })
    }

    /// Sample mode, unless the test patch adds files beside the test,
    /// which only an agent can create.
    fn reproducer_mode(&self) -> ReproducerMode {
        if self.added.is_empty() {
            ReproducerMode::Sample
        } else {
            ReproducerMode::React
        }
    }

    /// The script of every model call, the Reproducer's in `mode` (which
    /// goes into `row`).
    fn model(&self, mode: ReproducerMode, row: &mut CheckRow) -> ScriptedModel {
        let test_file = &self.test_file;
        // The localizer records the gold functions, then submits.
        let mut calls: Vec<Vec<String>> = Vec::new();
        for (path, symbol) in &self.locate {
            calls.push(vec![format!(
                "This is a place to change.\n\n```\nlocate {path}::{symbol}\n```"
            )]);
        }
        calls.push(vec!["That is all.\n\n```\nsubmit\n```".to_string()]);
        // The reproducer.
        row.reproducer_mode = Some(mode);
        match mode {
            ReproducerMode::Sample => calls.push(vec![format!(
                "```python\n{}\n```",
                self.test_text.trim_end_matches('\n')
            )]),
            // Create the files beside the test, open (or create) the test
            // file, replace its text, hand it in.
            ReproducerMode::React => {
                for (path, text) in &self.added {
                    calls.push(vec![format!(
                        "The tests need this file.\n\n```\ncreate {path}\n```"
                    )]);
                    calls.push(vec![format!(
                        "Its content.\n\n```\nedit 1:1\n{}\nend_of_edit\n```",
                        text.trim_end_matches('\n')
                    )]);
                }
                let open = if self.base_lines == 0 {
                    format!("The test file is new.\n\n```\ncreate {test_file}\n```")
                } else {
                    format!("I open the test file.\n\n```\nopen {test_file}\n```")
                };
                let edit = format!(
                    "I write the tests the issue needs.\n\n```\nedit 1:{}\n{}\nend_of_edit\n```",
                    self.base_lines.max(1),
                    self.test_text.trim_end_matches('\n')
                );
                let submit = format!(
                    "They should fail on this code.\n\n```\nsubmit_test {test_file} python -m pytest {test_file}\n```"
                );
                calls.extend([vec![open], vec![edit], vec![submit]]);
            }
        }
        calls.push(vec![
            format!("Reasoning: a harmless comment.\n\n{}", self.wrong),
            format!("Reasoning: the fix.\n\n{}", self.gold),
        ]);
        ScriptedModel {
            calls,
            next: Mutex::new(0),
        }
    }

    /// The pipeline's settings for the script: each stage's steps and
    /// candidates as many as the script answers.
    fn settings(&self, mode: ReproducerMode) -> Settings {
        let mut settings = Settings::defaults("scripted");
        settings.pipeline.template = false;
        settings.pipeline.reproduce = true;
        settings.pipeline.rank = true;
        settings.reproducer.mode = mode;
        settings.reproducer.candidates = 1;
        settings.agents.reproducer.max_steps = 3 + 2 * self.added.len();
        settings.localizer.mode = crate::agents::localize::LocalizerMode::React;
        settings.agents.localizer.max_steps = self.locate.len() + 1;
        settings.fixer.candidates = 2;
        // The scripted fixes are the patches as SEARCH/REPLACE blocks.
        settings.fixer.edit_format = crate::agents::fixer::EditFormat::SearchReplace;
        settings.ranker.compare = false;
        settings.ranker.test_timeout_s = CHECK_TEST_TIMEOUT_S;
        settings.aci.run_timeout_s = CHECK_TEST_TIMEOUT_S;
        settings
    }
}

/// The test file as the test patch leaves it, and the files the patch
/// adds beside it (data the tests read), which the reproducer creates.
fn test_patched(
    task: &Task,
    ws: &Workspace,
    scratch: &Path,
    test_file: &str,
) -> Result<(String, Vec<(String, String)>), CheckError> {
    let w = ws.clone_to(&scratch.join("test-patched"))?;
    crate::repo::apply_patch(w.path(), &task.test_patch)?;
    let read = |rel: &str| {
        let path = w.path().join(rel);
        std::fs::read_to_string(&path).map_err(|source| CheckError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    let text = read(test_file)?;
    let added: Vec<(String, String)> = crate::eval::patch_files(&task.test_patch)
        .into_iter()
        .filter(|f| *f != test_file && !ws.path().join(f).exists())
        .filter_map(|f| read(&f).ok().map(|t| (f, t)))
        .collect();
    let _ = w.remove();
    Ok((text, added))
}

/// The task's environment with the repository installed in `ws`, else a
/// bare one (why goes into `row`).
fn task_env(
    task: &Task,
    pool: &Pool<'_>,
    ws: &Workspace,
    scratch: &Path,
    row: &mut CheckRow,
) -> TaskEnv {
    let (setup, used) = pool.for_agents(task, None);
    row.environment = Some(used);
    let host = &pool.settings.host;
    match &setup {
        Some(s) => match s.install(host, ws.path(), &scratch.join("layer")) {
            Ok(i) => i.task,
            Err(e) => {
                if let Some(u) = row.environment.as_mut() {
                    u.error = Some(e.to_string());
                }
                TaskEnv::bare(host)
            }
        },
        None => TaskEnv::bare(host),
    }
}

/// What the Reproducer said and the test it accepted, into `row`.
fn record_reproduction(
    row: &mut CheckRow,
    mode: ReproducerMode,
    outcome: &masai::Outcome,
    trajectory: &Trajectory,
) {
    let reproduction = outcome.reproduction.as_ref();
    row.reproducer_said = match mode {
        ReproducerMode::React => trajectory
            .steps
            .iter()
            .rev()
            .find_map(|s| match &s.step {
                Step::Action(a) if a.action.starts_with("submit_test") => {
                    Some(a.observation.chars().take(2000).collect())
                }
                _ => None,
            })
            .unwrap_or_default(),
        ReproducerMode::Sample => reproduction
            .and_then(|r| r.samples.first())
            .map(|s| {
                let status = serde_json::to_value(s.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                let why = match s.status {
                    SampleStatus::Failed => s.signature.clone().unwrap_or_default(),
                    _ => s.reason.clone(),
                };
                format!("{status}: {why}").chars().take(2000).collect()
            })
            .unwrap_or_default(),
    };
    let accepted = reproduction.and_then(|r| r.test.as_ref());
    row.reproduction_accepted = accepted.is_some();
    row.reproduction_path = accepted.map(|t| t.path.clone());
    row.reproduction_command = accepted.map(|t| t.command.clone());
}

/// The Ranker's order of the candidates by name (`gold`, `wrong`), and
/// how the reproduction test went with each, into `row`.
fn record_ranking(row: &mut CheckRow, outcome: &masai::Outcome) {
    let name = |i: usize| -> String {
        let members = outcome
            .fixes
            .distinct
            .get(i)
            .map(|d| d.members.clone())
            .unwrap_or_default();
        match members.first() {
            Some(0) => "wrong".into(),
            Some(1) => "gold".into(),
            _ => format!("candidate {i}"),
        }
    };
    if let Some(r) = &outcome.ranking {
        row.order = r.order.iter().map(|&i| name(i)).collect();
        for e in &r.evaluations {
            match name(e.distinct).as_str() {
                "gold" => row.reproduction_with_gold = e.reproduction,
                "wrong" => row.reproduction_with_wrong = e.reproduction,
                _ => {}
            }
        }
    } else {
        row.order = (0..outcome.fixes.distinct.len()).map(name).collect();
    }
    row.gold_first = row.order.first().is_some_and(|n| n == "gold");
}

/// The test file whose tests the task's FAIL_TO_PASS names (pytest ids
/// name it), else the test patch's first Python file.
fn reproduction_file(task: &Task) -> Option<String> {
    let files: Vec<String> = crate::eval::patch_files(&task.test_patch)
        .into_iter()
        .filter(|f| f.ends_with(".py"))
        .collect();
    task.fail_to_pass
        .iter()
        .filter_map(|t| t.split("::").next())
        .find(|p| files.iter().any(|f| f == p))
        .map(str::to_string)
        .or_else(|| files.first().cloned())
}

/// What the localizer records: each gold-changed function (or, in a file
/// where the change is outside any, the file's first symbol, so that the
/// Fixer may edit the file).
fn locations(root: &Path, patch: &str) -> (Vec<(String, String)>, Vec<String>) {
    let gold = metrics::gold_functions(root, patch);
    let mut out: Vec<(String, String)> = gold
        .iter()
        .filter_map(|g| g.split_once("::"))
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect();
    for (path, _) in metrics::changed_lines(patch) {
        if out.iter().any(|(p, _)| *p == path) {
            continue;
        }
        let Ok(text) = crate::aci::read_text(root, &path) else {
            continue;
        };
        if let Some(s) = symbols::parse_symbols(&path, &text).symbols.first() {
            out.push((path, s.qualname.clone()));
        }
    }
    (out, gold)
}

/// The patch as SEARCH/REPLACE blocks, one per hunk (its old lines, its
/// new lines); with `comment`, instead, each first hunk of a file with
/// `comment` put before its old lines (a wrong fix).
pub fn search_replace(patch: &str, comment: Option<&str>) -> Result<String, CheckError> {
    let mut out = String::new();
    let mut path: Option<String> = None;
    let mut hunk: Option<(Vec<String>, Vec<String>)> = None;
    let mut commented = false;
    let flush = |out: &mut String,
                 path: &Option<String>,
                 hunk: &mut Option<(Vec<String>, Vec<String>)>,
                 commented: &mut bool| {
        if let (Some(p), Some((old, new))) = (path, hunk.take()) {
            if comment.is_some() && *commented {
                return;
            }
            let new = match comment {
                Some(c) => {
                    *commented = true;
                    let indent: String = old
                        .iter()
                        .find(|l| !l.trim().is_empty())
                        .map(|l| l.chars().take_while(|c| c.is_whitespace()).collect())
                        .unwrap_or_default();
                    std::iter::once(format!("{indent}{c}"))
                        .chain(old.iter().cloned())
                        .collect()
                }
                None => new,
            };
            out.push_str(&format!(
                "{p}\n<<<<<<< SEARCH\n{}\n=======\n{}\n>>>>>>> REPLACE\n",
                old.join("\n"),
                new.join("\n")
            ));
        }
    };
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("diff --git a/") {
            flush(&mut out, &path, &mut hunk, &mut commented);
            commented = false;
            path = rest.split(" b/").next().map(str::to_string);
        } else if line.starts_with("new file mode") || line.starts_with("deleted file mode") {
            return Err(CheckError::Unscriptable(format!(
                "creates or deletes {}",
                path.clone().unwrap_or_default()
            )));
        } else if line.starts_with("@@") {
            flush(&mut out, &path, &mut hunk, &mut commented);
            hunk = Some((Vec::new(), Vec::new()));
        } else if let Some((old, new)) = hunk.as_mut() {
            if line.starts_with("---") || line.starts_with("+++") || line.starts_with('\\') {
                continue;
            }
            match line.split_at_checked(1) {
                Some((" ", rest)) => {
                    old.push(rest.to_string());
                    new.push(rest.to_string());
                }
                Some(("-", rest)) => old.push(rest.to_string()),
                Some(("+", rest)) => new.push(rest.to_string()),
                _ if line.is_empty() => {
                    old.push(String::new());
                    new.push(String::new());
                }
                _ => {}
            }
        }
    }
    flush(&mut out, &path, &mut hunk, &mut commented);
    Ok(out)
}

/// Answers each call with the next scripted candidates, whatever it was
/// asked; past the script, an error.
struct ScriptedModel {
    calls: Vec<Vec<String>>,
    next: Mutex<usize>,
}

struct ScriptedConversation<'a>(&'a ScriptedModel);

impl Conversation for ScriptedConversation<'_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let mut next = self.0.next.lock().unwrap_or_else(|e| e.into_inner());
        let call = self.0.calls.get(*next).ok_or_else(|| {
            EngineError::Backend(format!(
                "the check's script has {} calls; the pipeline asked for more",
                self.0.calls.len()
            ))
        })?;
        *next += 1;
        let n = request.n.max(1);
        let candidates: Vec<Candidate> = (0..n)
            .map(|i| Candidate {
                text: call.get(i).or(call.last()).cloned().unwrap_or_default(),
                tokens: Vec::new(),
                stop: Stop::EndOfText,
            })
            .collect();
        Ok(Generation {
            stats: Stats {
                prompt_tokens: 0,
                prompt_tokens_evaluated: 0,
                prompt_tokens_reused: 0,
                generated_tokens: vec![0; candidates.len()],
                draft_tokens: 0,
                draft_accepted: 0,
                grammar: Default::default(),
                prompt_s: 0.0,
                decode_s: 0.0,
                total_s: 0.0,
            },
            candidates,
        })
    }
}

impl Backend for ScriptedModel {
    fn conversation(
        &self,
        _n_seq_max: usize,
        _reply_tokens: usize,
    ) -> Result<Box<dyn Conversation + '_>, EngineError> {
        Ok(Box::new(ScriptedConversation(self)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_becomes_search_replace_blocks() -> Result<(), Box<dyn std::error::Error>> {
        let patch = "diff --git a/p/m.py b/p/m.py\n--- a/p/m.py\n+++ b/p/m.py\n@@ -1,3 +1,3 @@\n def f():\n-    return 1\n+    return 2\n \n@@ -10,2 +10,3 @@\n     x = 1\n+    y = 2\n     z = 3\n";
        assert_eq!(
            search_replace(patch, None)?,
            "p/m.py\n<<<<<<< SEARCH\ndef f():\n    return 1\n\n=======\ndef f():\n    return 2\n\n>>>>>>> REPLACE\n\
             p/m.py\n<<<<<<< SEARCH\n    x = 1\n    z = 3\n=======\n    x = 1\n    y = 2\n    z = 3\n>>>>>>> REPLACE\n"
        );
        assert_eq!(
            search_replace(patch, Some("# no"))?,
            "p/m.py\n<<<<<<< SEARCH\ndef f():\n    return 1\n\n=======\n# no\ndef f():\n    return 1\n\n>>>>>>> REPLACE\n"
        );
        let new = "diff --git a/n.py b/n.py\nnew file mode 100644\n";
        assert!(matches!(
            search_replace(new, None),
            Err(CheckError::Unscriptable(_))
        ));
        Ok(())
    }
}
