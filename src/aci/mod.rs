//! The agent-computer interface (SWE-agent's ACI): the commands an agent
//! uses to look at and change a repository — a windowed file viewer,
//! capped searches, MASAI's lazy views over the code index, edits that are
//! refused when they break the syntax, and `run` through the sandbox — and
//! the exact text each one shows.
//!
//! The interface never fails as a whole: whatever goes wrong with one
//! command (a missing file, a bad line number, a sandbox refusal) is told
//! to the agent in that command's observation.
//!
//! Files are read and written by the runner, outside the sandbox, so every
//! path goes through [`crate::edit::resolve`] (nothing outside the
//! repository, nothing under `.git`) and every read and write through
//! [`crate::confined`]: no symbolic link is ever followed, not even one
//! planted between the check and the access.

pub mod check;
pub mod command;
mod search;
mod views;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use patchwright_sandbox as sandbox;

use crate::env::task::TaskEnv;

pub use command::{Choices, Command, ParseError, Turn};

use crate::edit::EditError;
use crate::index::candidates::is_excluded;
use crate::index::symbols::{self, CodeIndex};

/// Why a command could not do its work. Each message is the observation
/// the model sees instead (SWE-agent's wording).
#[derive(Debug, thiserror::Error)]
pub enum AciError {
    #[error("Error: {0}")]
    Path(#[from] EditError),
    #[error("Error: {0}")]
    Confined(#[from] crate::confined::ConfinedError),
    #[error("Error: File {0} not found")]
    NotFound(String),
    #[error("Error: Directory {0} not found")]
    NoDirectory(String),
    #[error("Error: {0} is a directory. You can only open files.")]
    IsDirectory(String),
    #[error("Error: {0} is not a regular file.")]
    NotRegular(String),
    #[error("Error: {path} is {size} bytes, too large to show (the limit is {MAX_VIEW_BYTES}).")]
    TooLarge { path: String, size: u64 },
    #[error("Error: {0} is a binary file.")]
    Binary(String),
    #[error("Error: {0} is not UTF-8 text.")]
    NotUtf8(String),
    #[error("No file open. Use the open command first.")]
    NoFileOpen,
    #[error("Error: the sandbox cannot run commands here: {0}")]
    NoSandbox(#[source] crate::env::EnvError),
    #[error("Error: the sandbox refused to run the command: {0}")]
    Refused(#[source] sandbox::SandboxError),
    /// The tier runs only Python (the WASI tier): the ACI's own commands
    /// explore instead.
    #[error(
        "Error: the sandbox refused to run the command: {0} — use the ACI's \
         search_dir/find_file/open for exploring, and Python for the rest"
    )]
    NotPython(#[source] sandbox::SandboxError),
}

/// Lines shown by the file viewer, SWE-agent's default.
pub const DEFAULT_WINDOW: usize = 100;
/// Lines kept from the previous window when scrolling, so the reader keeps
/// their place (SWE-agent's overlap).
pub const SCROLL_OVERLAP: usize = 2;
/// Most results a search lists before it asks for a narrower query: more
/// would flood a small model's context.
pub const MAX_SEARCH_RESULTS: usize = 50;
/// Most lines `view_symbol` shows of one symbol; a longer one says how to
/// see the rest.
pub const MAX_SYMBOL_LINES: usize = 200;
/// Most line numbers listed when `str_replace` finds its text more than
/// once.
pub const MAX_LISTED_LINES: usize = 10;
/// Largest file the viewer opens: bigger files are data, not code to read.
pub const MAX_VIEW_BYTES: u64 = 4 << 20;
/// Default wall-clock limit of one `run` command: long enough for a test
/// file, short enough that a hung command costs one turn, not the episode.
pub const DEFAULT_RUN_TIMEOUT_S: u64 = 120;
/// Lines of `run` output kept at each end (head and tail) of an
/// observation.
pub const RUN_OUTPUT_LINES: usize = 50;
/// Most paths offered to the grammar: a choice over more is slow to build
/// and to sample.
pub const MAX_GRAMMAR_PATHS: usize = 50_000;
/// Most symbols offered to the grammar as a choice (`view_symbol`,
/// `locate`); a larger repository gets any dotted name in an existing
/// Python file instead, checked when the command runs.
pub const MAX_SYMBOL_CHOICES: usize = 5_000;
/// Directories the listings and searches skip: version control and
/// interpreter caches.
pub const SKIPPED_DIRS: &[&str] = &[
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".tox",
    ".mypy_cache",
];

/// The interface's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AciSettings {
    /// Lines of the viewer window.
    pub window: usize,
    /// Wall-clock limit of one `run`, in seconds.
    pub run_timeout_s: u64,
}

impl Default for AciSettings {
    fn default() -> Self {
        AciSettings {
            window: DEFAULT_WINDOW,
            run_timeout_s: DEFAULT_RUN_TIMEOUT_S,
        }
    }
}

/// What one command showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub text: String,
    /// The command was `submit`: the episode is over.
    pub submitted: bool,
}

impl Observation {
    fn text(text: impl Into<String>) -> Observation {
        Observation {
            text: text.into(),
            submitted: false,
        }
    }
}

/// Most locations the localizer may record.
pub const MAX_LOCATIONS: usize = 5;

/// What `submit_test` must see for the test to be accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestCheck {
    /// The test runs and passes (a template).
    Passes,
    /// The test runs and fails, not because it is broken (a reproduction
    /// on the base commit).
    Fails,
}

/// A test handed in with `submit_test` and accepted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubmittedTest {
    pub path: String,
    pub command: String,
    /// The file's text when it was handed in.
    pub text: String,
    /// The command's output on the check run.
    pub output: String,
    /// Other files the agent had created when it handed the test in (data
    /// the test reads, a helper module), placed with it wherever it runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<TestFile>,
}

/// A file that goes with a submitted test.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TestFile {
    pub path: String,
    pub text: String,
}

/// Most files that go with a submitted test.
pub const MAX_TEST_FILES: usize = 20;
/// Largest file that goes with a submitted test (data, not build output).
pub const MAX_TEST_FILE_BYTES: u64 = 1 << 20;

impl SubmittedTest {
    /// Writes the test and the files that go with it into the worktree at
    /// `dir` (paths resolved with `edit::resolve`).
    pub fn place(&self, dir: &Path) -> Result<(), EditError> {
        let all = std::iter::once((self.path.as_str(), self.text.as_str())).chain(
            self.files
                .iter()
                .map(|f| (f.path.as_str(), f.text.as_str())),
        );
        let root = crate::confined::Root::open(dir)?;
        for (path, text) in all {
            crate::edit::resolve(dir, path)?;
            if let Some(parent) = Path::new(path)
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
            {
                root.create_dir_all(parent)?;
            }
            root.write(path, text)?;
        }
        Ok(())
    }
}

/// A place to edit recorded with `locate`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Location {
    pub path: String,
    pub symbol: String,
    pub start_line: usize,
    pub end_line: usize,
}

/// The file the viewer has open and the first line of its window.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OpenFile {
    path: String,
    first: usize,
}

/// The interface over one repository.
pub struct Aci {
    root: PathBuf,
    base: String,
    settings: AciSettings,
    index: CodeIndex,
    open: Option<OpenFile>,
    /// Where `run` and `submit_test` run commands.
    env: TaskEnv,
    /// `env`'s policy for `root`, made on the first command.
    policy: Option<sandbox::Policy>,
    test_check: Option<TestCheck>,
    test: Option<SubmittedTest>,
    locations: Vec<Location>,
}

impl Aci {
    /// An interface over the repository at `root` (a git repository whose
    /// HEAD, `base`, is what `submit` diffs against), with its code index,
    /// running commands in `env` (the repository installed in its task
    /// environment, or [`TaskEnv::bare`]): its policy for `run`, and, when
    /// it comes from a spec, the repository's own test command and log
    /// format for `submit_test`.
    pub fn new(
        root: &Path,
        base: &str,
        index: CodeIndex,
        settings: AciSettings,
        env: TaskEnv,
    ) -> Aci {
        Aci {
            root: root.to_path_buf(),
            base: base.to_string(),
            settings,
            index,
            open: None,
            env,
            policy: None,
            test_check: None,
            test: None,
            locations: Vec::new(),
        }
    }

    /// What `submit_test` checks before it accepts a test.
    pub fn set_test_check(&mut self, check: TestCheck) {
        self.test_check = Some(check);
    }

    /// The test accepted by `submit_test`, if any.
    pub fn submitted_test(&self) -> Option<&SubmittedTest> {
        self.test.as_ref()
    }

    /// The locations recorded with `locate`.
    pub fn locations(&self) -> &[Location] {
        &self.locations
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn settings(&self) -> AciSettings {
        self.settings
    }

    /// The path of the open file, if any.
    pub fn open_file(&self) -> Option<&str> {
        self.open.as_ref().map(|o| o.path.as_str())
    }

    /// The patch of everything changed since `base`.
    pub fn diff(&self) -> Result<String, crate::repo::RepoError> {
        crate::repo::diff_against(&self.root, &self.base)
    }

    /// What the grammar may offer: the repository's files and directories
    /// as they are now (files created by the agent included).
    pub fn choices(&self) -> Choices {
        let mut choices = Choices {
            dirs: vec![".".to_string()],
            ..Choices::default()
        };
        if self.index.symbol_count() <= MAX_SYMBOL_CHOICES {
            choices.symbols = self
                .index
                .files
                .iter()
                .flat_map(|f| {
                    f.symbols
                        .iter()
                        .map(move |s| format!("{}::{}", f.path, s.qualname))
                })
                .collect();
            choices.locatable = choices
                .symbols
                .iter()
                .filter(|s| !is_excluded(s.split("::").next().unwrap_or(s)))
                .cloned()
                .collect();
        }
        for (path, is_dir) in walk(&self.root, "") {
            if choices.files.len() + choices.dirs.len() >= MAX_GRAMMAR_PATHS {
                break;
            }
            if is_dir {
                choices.dirs.push(path);
            } else {
                if path.ends_with(".py") {
                    if !is_excluded(&path) {
                        choices.locatable_files.push(path.clone());
                    }
                    choices.python_files.push(path.clone());
                }
                choices.files.push(path);
            }
        }
        choices
    }

    /// Runs one command and returns what it shows.
    pub fn execute(&mut self, command: &Command) -> Observation {
        let text = match command {
            Command::Open { path, line } => self.open(path, *line),
            Command::Goto { line } => self.goto(*line),
            Command::ScrollUp => self.scroll(false),
            Command::ScrollDown => self.scroll(true),
            Command::FindFile { name, dir } => search::find_file(&self.root, name, dir.as_deref()),
            Command::SearchDir { text, dir } => {
                search::search_dir(&self.root, text, dir.as_deref())
            }
            Command::SearchFile { text, path } => match path.as_deref().or(self.open_file()) {
                Some(path) => search::search_file(&self.root, text, path),
                None => "No file open. Use the open command first.".to_string(),
            },
            Command::ViewSkeleton { path } => views::skeleton(&self.root, path),
            Command::ViewSymbol { path, symbol } => views::symbol(&self.root, path, symbol),
            Command::SearchClass { name } => views::search_class(&self.index, name),
            Command::SearchMethod { name, class } => {
                views::search_method(&self.root, &self.index, name, class.as_deref())
            }
            Command::Edit { start, end, text } => self.edit(*start, *end, text),
            Command::StrReplace { path, old, new } => self.str_replace(path, old, new),
            Command::Create { path } => self.create(path),
            Command::Run { command } => self.run(command),
            Command::Locate { path, symbol } => self.locate(path, symbol),
            Command::SubmitTest { path, command } => {
                let (text, accepted) = self.submit_test(path, command);
                return Observation {
                    text,
                    submitted: accepted,
                };
            }
            Command::Submit => {
                return Observation {
                    text: match self.diff() {
                        Ok(patch) => patch,
                        Err(e) => format!("Error: cannot compute the patch: {e}"),
                    },
                    submitted: true,
                }
            }
        };
        Observation::text(text)
    }

    /// The window of `path` starting at `first` (clamped).
    fn show(&mut self, path: &str, lines: &[&str], first: usize) -> String {
        let first = clamp_first(first, lines.len(), self.settings.window);
        self.open = Some(OpenFile {
            path: path.to_string(),
            first,
        });
        window(path, lines, first, self.settings.window)
    }

    /// The first window line that puts `line` in the middle of the window.
    fn centred(&self, line: usize) -> usize {
        line.saturating_sub(self.settings.window / 2).max(1)
    }

    fn open(&mut self, path: &str, line: Option<usize>) -> String {
        let text = match read_text(&self.root, path) {
            Ok(t) => t,
            Err(e) => return e.to_string(),
        };
        let lines: Vec<&str> = text.lines().collect();
        let mut warning = String::new();
        let first = match line {
            None => 1,
            Some(0) => return "Error: LINE must be at least 1.".to_string(),
            Some(l) if l > lines.len().max(1) => {
                let total = lines.len().max(1);
                warning = format!(
                    "Warning: LINE ({l}) is greater than the number of lines in the file ({total})\n\
                     Warning: Setting LINE to {total}\n"
                );
                self.centred(total)
            }
            Some(l) => self.centred(l),
        };
        format!("{warning}{}", self.show(path, &lines, first))
    }

    /// The open file's text, or the message to show when there is none.
    fn open_text(&self) -> Result<(String, String), AciError> {
        let Some(open) = &self.open else {
            return Err(AciError::NoFileOpen);
        };
        let text = read_text(&self.root, &open.path)?;
        Ok((open.path.clone(), text))
    }

    fn goto(&mut self, line: usize) -> String {
        let (path, text) = match self.open_text() {
            Ok(x) => x,
            Err(e) => return e.to_string(),
        };
        let lines: Vec<&str> = text.lines().collect();
        if line == 0 || line > lines.len().max(1) {
            return format!(
                "Error: LINE must be between 1 and {} (the number of lines in the file).",
                lines.len().max(1)
            );
        }
        let first = self.centred(line);
        self.show(&path, &lines, first)
    }

    fn scroll(&mut self, down: bool) -> String {
        let (path, text) = match self.open_text() {
            Ok(x) => x,
            Err(e) => return e.to_string(),
        };
        let lines: Vec<&str> = text.lines().collect();
        let step = self.settings.window.saturating_sub(SCROLL_OVERLAP).max(1);
        let current = self.open.as_ref().map_or(1, |o| o.first);
        let first = if down {
            current + step
        } else {
            current.saturating_sub(step).max(1)
        };
        self.show(&path, &lines, first)
    }

    /// Writes `new` to `path` unless it adds syntax errors to a Python
    /// file; shows the window at `line` either way.
    fn write_checked(&mut self, path: &str, old: &str, new: &str, line: usize) -> String {
        if path.ends_with(".py") {
            let before = symbols::syntax_errors(old);
            let after = symbols::syntax_errors(new);
            if !after.is_empty() && after.len() > before.len() {
                return self.refused(path, old, new, line, &after);
            }
        }
        if let Err(e) = crate::edit::resolve(&self.root, path) {
            return format!("Error: {e}");
        }
        if let Err(e) = write_file(&self.root, path, new) {
            return format!("Error: {e}");
        }
        self.index.update_file(&self.root, path);
        let lines: Vec<&str> = new.lines().collect();
        let first = self.centred(line);
        format!(
            "{}\nFile updated. Please review the changes and make sure they are correct \
             (correct indentation, no duplicate lines, etc). Edit the file again if necessary.",
            self.show(path, &lines, first)
        )
    }

    fn refused(
        &mut self,
        path: &str,
        old: &str,
        new: &str,
        line: usize,
        errors: &[symbols::SyntaxError],
    ) -> String {
        let w = self.settings.window;
        let first = self.centred(line);
        let new_lines: Vec<&str> = new.lines().collect();
        let old_lines: Vec<&str> = old.lines().collect();
        let errors: String = errors
            .iter()
            .map(|e| format!("- line {}, column {}: {}\n", e.line, e.column, e.message))
            .collect();
        let rule = "-------------------------------------------------";
        let would = window(path, &new_lines, clamp_first(first, new_lines.len(), w), w);
        let was = window(path, &old_lines, clamp_first(first, old_lines.len(), w), w);
        format!(
            "Your proposed edit has introduced new syntax error(s). Please read this error message \
             carefully and then retry editing the file.\n\nERRORS:\n{errors}\n\
             This is how your edit would have looked if applied\n{rule}\n{would}\n{rule}\n\n\
             This is the original code before your edit\n{rule}\n{was}\n{rule}\n\
             Your changes have NOT been applied. Please fix your edit command and try again.\n\
             You either need to 1) Specify the correct start/end line arguments or 2) Correct your edit code.\n\
             DO NOT re-run the same failed edit command. Running it again will lead to the same error."
        )
    }

    fn edit(&mut self, start: usize, end: usize, replacement: &str) -> String {
        let (path, text) = match self.open_text() {
            Ok(x) => x,
            Err(e) => return e.to_string(),
        };
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let total = lines.len();
        if start == 0 || start > total + 1 {
            return format!(
                "Error: START must be between 1 and {} for {path}.",
                total + 1
            );
        }
        if end + 1 < start || end > total {
            return format!(
                "Error: END must be between START - 1 ({}) and {total} (the last line of {path}).",
                start - 1
            );
        }
        let mut new = String::with_capacity(text.len() + replacement.len());
        for l in &lines[..start - 1] {
            new.push_str(l);
        }
        if start > 1 && !new.ends_with('\n') {
            new.push('\n');
        }
        new.push_str(replacement);
        for l in &lines[end..] {
            new.push_str(l);
        }
        self.write_checked(&path, &text, &new, start)
    }

    fn str_replace(&mut self, path: &str, old: &str, new: &str) -> String {
        let text = match read_text(&self.root, path) {
            Ok(t) => t,
            Err(e) => return e.to_string(),
        };
        if old.is_empty() {
            return "Error: the SEARCH part is empty; copy the lines to replace into it."
                .to_string();
        }
        // OLD is whole lines: it must start where a line starts.
        let at: Vec<usize> = text
            .match_indices(old)
            .map(|(i, _)| i)
            .filter(|&i| i == 0 || text.as_bytes()[i - 1] == b'\n')
            .collect();
        let line_of = |i: usize| text[..i].matches('\n').count() + 1;
        match at.as_slice() {
            [] => format!(
                "No replacement was performed: the SEARCH lines did not appear verbatim in {path}."
            ),
            [i] => {
                let replaced = format!("{}{}{}", &text[..*i], new, &text[i + old.len()..]);
                self.write_checked(path, &text, &replaced, line_of(*i))
            }
            many => {
                let mut lines: Vec<String> = many
                    .iter()
                    .take(MAX_LISTED_LINES)
                    .map(|&i| line_of(i).to_string())
                    .collect();
                if many.len() > MAX_LISTED_LINES {
                    lines.push("…".to_string());
                }
                format!(
                    "No replacement was performed: the SEARCH lines appear {} times in {path}, at lines {}. \
                     Include more lines so they appear once.",
                    many.len(),
                    lines.join(", ")
                )
            }
        }
    }

    fn create(&mut self, path: &str) -> String {
        let full = match crate::edit::resolve(&self.root, path) {
            Ok(p) => p,
            Err(e) => return format!("Error: {e}"),
        };
        if std::fs::symlink_metadata(&full).is_ok() {
            let shown = self.open(path, None);
            return format!("Error: File '{path}' already exists.\n{shown}");
        }
        if let Some(parent) = Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            let made =
                crate::confined::Root::open(&self.root).and_then(|r| r.create_dir_all(parent));
            if let Err(e) = made {
                return format!("Error: {e}");
            }
        }
        if let Err(e) = write_file(&self.root, path, "\n") {
            return format!("Error: {e}");
        }
        self.index.update_file(&self.root, path);
        self.show(path, &[""], 1)
    }

    /// Runs `command` with bash in the sandbox.
    fn sandboxed(&mut self, command: &str) -> Result<sandbox::Outcome, AciError> {
        let mut policy = match &self.policy {
            Some(p) => p.clone(),
            None => {
                let p = self.env.policy(&self.root).map_err(AciError::NoSandbox)?;
                self.policy = Some(p.clone());
                p
            }
        };
        policy.limits.timeout_ms = self.settings.run_timeout_s.saturating_mul(1000);
        let started = SystemTime::now();
        let argv = ["bash".to_string(), "-c".to_string(), command.to_string()];
        let outcome = sandbox::run(&policy, &argv);
        self.reindex_changed_since(started);
        outcome.map_err(|e| match e {
            e @ sandbox::SandboxError::Unsupported { .. } => AciError::NotPython(e),
            e => AciError::Refused(e),
        })
    }

    fn locate(&mut self, path: &str, qualname: &str) -> String {
        if is_excluded(path) {
            return format!(
                "Error: {path} is a test file; the fix goes into the source code. Locate the \
                 function or method the tests exercise instead."
            );
        }
        let text = match read_text(&self.root, path) {
            Ok(t) => t,
            Err(e) => return e.to_string(),
        };
        let file = symbols::parse_symbols(path, &text);
        let Some(s) = file.symbols.iter().find(|s| s.qualname == qualname) else {
            return format!(
                "Error: no function, method or class \"{qualname}\" in {path}. Use view_skeleton {path} to see its names."
            );
        };
        if self
            .locations
            .iter()
            .any(|l| l.path == path && l.symbol == qualname)
        {
            return format!(
                "{path}::{qualname} is already recorded. Record another place, or submit."
            );
        }
        if self.locations.len() >= MAX_LOCATIONS {
            return format!(
                "Already {MAX_LOCATIONS} locations recorded, the most allowed. Submit now."
            );
        }
        self.locations.push(Location {
            path: path.to_string(),
            symbol: qualname.to_string(),
            start_line: s.start_line,
            end_line: s.end_line,
        });
        format!(
            "Recorded location {}: {path}::{qualname} (lines {}-{}). Record another place with locate, or submit.",
            self.locations.len(),
            s.start_line,
            s.end_line
        )
    }

    /// Checks a handed-in test; returns the observation and whether it was
    /// accepted. With an environment from a spec the test runs the
    /// repository's way (its test command on the file, its log format);
    /// otherwise `command` runs as given.
    fn submit_test(&mut self, path: &str, command: &str) -> (String, bool) {
        let text = match read_text(&self.root, path) {
            Ok(t) => t,
            Err(e) => return (e.to_string(), false),
        };
        let command = match self.env.spec() {
            Some(_) => self.env.test_script(&[path.to_string()]),
            None => command.to_string(),
        };
        let started = SystemTime::now();
        let ran = check::run_test(&self.root, &self.env, &command, self.settings.run_timeout_s);
        self.reindex_changed_since(started);
        let (outcome, verdict) = match ran {
            Ok(r) => r,
            Err(e) => return (e.to_string(), false),
        };
        let output = trim_output(&outcome.output);
        let wanted = self.test_check.unwrap_or(TestCheck::Passes);
        let problem = match (wanted, &verdict) {
            (TestCheck::Passes, check::Verdict::Passed)
            | (TestCheck::Fails, check::Verdict::Failed) => None,
            (TestCheck::Passes, check::Verdict::Failed) => {
                Some("the test fails; it must pass".to_string())
            }
            (TestCheck::Fails, check::Verdict::Passed) => {
                Some("the test passes; it must fail on this code, because of the issue".to_string())
            }
            (_, check::Verdict::Broken(why)) => Some(format!("the test is broken: {why}")),
        };
        let ran_as = match self.env.spec() {
            Some(spec) => format!(" (run the repository's way: `{} {path}`)", spec.test_cmd),
            None => String::new(),
        };
        if let Some(problem) = problem {
            return (
                format!(
                    "Not accepted{ran_as}: {problem}. Its output:\n{output}\nFix the test or the command, then submit_test again."
                ),
                false,
            );
        }
        self.test = Some(SubmittedTest {
            path: path.to_string(),
            command: command.clone(),
            text,
            output: outcome.output.clone(),
            files: self.created_files(path),
        });
        let accepted = if ran_as.is_empty() {
            format!("Accepted: {path}, run with `{command}`.")
        } else {
            format!("Accepted{ran_as}: {path}.")
        };
        (accepted, true)
    }

    /// The text files the agent created (untracked, not ignored), but
    /// `except`: at most [`MAX_TEST_FILES`] of at most
    /// [`MAX_TEST_FILE_BYTES`] each.
    fn created_files(&self, except: &str) -> Vec<TestFile> {
        crate::repo::untracked_files(&self.root)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p != except)
            .filter(|p| {
                crate::edit::resolve(&self.root, p).is_ok()
                    && crate::confined::Root::open(&self.root)
                        .and_then(|r| r.metadata(p))
                        .ok()
                        .flatten()
                        .is_some_and(|m| {
                            m.kind == crate::confined::Kind::File && m.len <= MAX_TEST_FILE_BYTES
                        })
            })
            .filter_map(|p| {
                let text = read_text(&self.root, &p).ok()?;
                Some(TestFile { path: p, text })
            })
            .take(MAX_TEST_FILES)
            .collect()
    }

    fn run(&mut self, command: &str) -> String {
        let outcome = match self.sandboxed(command) {
            Ok(o) => o,
            Err(e) => return e.to_string(),
        };
        let mut text = trim_output(&outcome.output);
        if text.trim().is_empty() {
            text = if outcome.success() {
                "Your command ran successfully and did not produce any output.".to_string()
            } else {
                "(no output)".to_string()
            };
        }
        if outcome.timed_out {
            text.push_str(&format!(
                "\n(The command timed out after {} seconds and was killed.)",
                self.settings.run_timeout_s
            ));
        } else if let Some(sig) = &outcome.signal {
            text.push_str(&format!("\n(The command was killed by {}.)", sig.name));
        } else if let Some(code) = outcome.exit_code.filter(|&c| c != 0) {
            text.push_str(&format!("\n(exit code {code})"));
        }
        text
    }

    /// Re-parses the Python files a command changed (or created) since `t`.
    fn reindex_changed_since(&mut self, t: SystemTime) {
        let since = t.checked_sub(Duration::from_secs(1)).unwrap_or(t);
        for (path, is_dir) in walk(&self.root, "") {
            if is_dir || !path.ends_with(".py") {
                continue;
            }
            let changed = std::fs::symlink_metadata(self.root.join(&path))
                .and_then(|m| m.modified())
                .is_ok_and(|m| m >= since);
            if changed {
                self.index.update_file(&self.root, &path);
            }
        }
    }
}

/// The viewer's window: a header with the path and length, "(N more lines
/// above)", numbered lines, "(N more lines below)".
pub fn window(path: &str, lines: &[&str], first: usize, size: usize) -> String {
    let total = lines.len();
    let mut out = format!("[File: {path} ({total} lines total)]\n");
    if total == 0 {
        return out.trim_end().to_string();
    }
    let first = first.clamp(1, total);
    let last = (first + size.max(1) - 1).min(total);
    if first > 1 {
        out.push_str(&format!("({} more lines above)\n", first - 1));
    }
    for (i, line) in lines[first - 1..last].iter().enumerate() {
        out.push_str(&format!("{}:{}\n", first + i, line));
    }
    if last < total {
        out.push_str(&format!("({} more lines below)\n", total - last));
    }
    out.trim_end_matches('\n').to_string()
}

/// `first` moved so the window stays inside a file of `total` lines.
fn clamp_first(first: usize, total: usize, size: usize) -> usize {
    let last_start = total.saturating_sub(size.max(1)) + 1;
    first.clamp(1, last_start.max(1))
}

/// A text file of the repository, or the message to show instead.
pub(crate) fn read_text(root: &Path, path: &str) -> Result<String, AciError> {
    crate::edit::resolve(root, path)?;
    let confined = crate::confined::Root::open(root)?;
    let meta = match confined.metadata(path)? {
        Some(m) => m,
        None => return Err(AciError::NotFound(path.to_string())),
    };
    match meta.kind {
        crate::confined::Kind::File => {}
        crate::confined::Kind::Dir => return Err(AciError::IsDirectory(path.to_string())),
        // A link planted since `resolve` looked: read through confinement
        // anyway, so the refusal names the link and where it leads.
        crate::confined::Kind::Symlink => {
            confined.read(path)?;
            return Err(AciError::NotRegular(path.to_string()));
        }
        crate::confined::Kind::Other => return Err(AciError::NotRegular(path.to_string())),
    }
    if meta.len > MAX_VIEW_BYTES {
        return Err(AciError::TooLarge {
            path: path.to_string(),
            size: meta.len,
        });
    }
    let bytes = confined.read(path)?;
    if bytes.contains(&0) {
        return Err(AciError::Binary(path.to_string()));
    }
    String::from_utf8(bytes).map_err(|_| AciError::NotUtf8(path.to_string()))
}

/// Writes `path` of the repository at `root` through
/// [`crate::confined`]: a link planted by sandboxed code as the file
/// itself is replaced (removed as a link), never written through; a link
/// on the way is refused.
fn write_file(root: &Path, path: &str, text: &str) -> Result<(), crate::confined::ConfinedError> {
    let confined = crate::confined::Root::open(root)?;
    if confined
        .metadata(path)?
        .is_some_and(|m| m.kind == crate::confined::Kind::Symlink)
    {
        confined.remove_file(path)?;
    }
    confined.write(path, text)
}

/// The files and directories under `root/dir` (paths relative to `root`),
/// sorted, without following symbolic links or entering [`SKIPPED_DIRS`].
pub(crate) fn walk(root: &Path, dir: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.trim_matches('/').to_string()];
    while let Some(rel) = stack.pop() {
        let full = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&rel)
        };
        let Ok(entries) = std::fs::read_dir(&full) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if kind.is_dir() {
                if !SKIPPED_DIRS.contains(&name.as_str()) {
                    out.push((path.clone(), true));
                    stack.push(path);
                }
            } else if kind.is_file() {
                out.push((path, false));
            }
        }
    }
    out.sort();
    out
}

/// The output of a command as an observation: at most [`RUN_OUTPUT_LINES`]
/// lines from each end, with a count of what was left out.
fn trim_output(output: &str) -> String {
    let lines: Vec<&str> = output.trim_end().lines().collect();
    if lines.len() <= 2 * RUN_OUTPUT_LINES {
        return lines.join("\n");
    }
    format!(
        "{}\n({} lines omitted)\n{}",
        lines[..RUN_OUTPUT_LINES].join("\n"),
        lines.len() - 2 * RUN_OUTPUT_LINES,
        lines[lines.len() - RUN_OUTPUT_LINES..].join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_clamped_to_the_file() {
        let cases = [
            // (first, total, size) -> first
            (1, 10, 4, 1),
            (9, 10, 4, 7),
            (50, 10, 100, 1),
            (3, 0, 4, 1),
        ];
        for (first, total, size, expected) in cases {
            assert_eq!(
                clamp_first(first, total, size),
                expected,
                "{first} {total} {size}"
            );
        }
        let lines = ["a", "b", "c", "d", "e"];
        assert_eq!(
            window("x.py", &lines, 2, 2),
            "[File: x.py (5 lines total)]\n(1 more lines above)\n2:b\n3:c\n(2 more lines below)"
        );
        assert_eq!(window("e.py", &[], 1, 10), "[File: e.py (0 lines total)]");
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let text: String = (1..=120).map(|i| format!("{i}\n")).collect();
        let t = trim_output(&text);
        assert!(t.starts_with("1\n2\n"));
        assert!(t.contains("\n50\n(20 lines omitted)\n71\n"), "{t}");
        assert!(t.ends_with("\n120"));
    }
}
