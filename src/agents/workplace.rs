//! What every stage of one task works in: the issue, the workspace at the
//! base commit, its environment, where scratch worktrees go and how many
//! test runs go at once.

use std::path::Path;

use crate::dataset::Issue;
use crate::env::task::TaskEnv;
use crate::repo::Workspace;

/// One task, as the stages see it.
#[derive(Clone, Copy)]
pub struct Workplace<'a> {
    /// What the agents are asked to resolve (never the answer).
    pub issue: &'a Issue,
    /// The task's workspace at the base commit; each stage leaves it so.
    pub ws: &'a Workspace,
    /// The task's environment (the workspace installed in it).
    pub env: &'a TaskEnv,
    /// Candidates' and tests' worktrees and layers go under it.
    pub scratch: &'a Path,
    /// Test runs at once (`[pipeline] parallel_runs`).
    pub parallel_runs: usize,
}
