//! The wheelhouse: the dependencies of task commits whose own dependency
//! files differ from the setup commit's, downloaded ahead (with the
//! network, in the sandbox) so that each task's install into its layer
//! finds them with the network off.

use std::path::{Path, PathBuf};

use patchwright_sandbox as sandbox;

use super::{io, pip_diagnosis, quote, BuildError, Index, Plan};
use crate::repo::Workspace;

impl Plan {
    /// Where the dependencies of task commits whose own requirements differ
    /// from the setup commit's are kept, as wheels and sdists; the layer's
    /// install finds them there with the network off.
    pub fn wheelhouse(&self) -> PathBuf {
        self.meta().join("wheels")
    }

    /// Where the build keeps a copy of the spec's `downloads`, so that
    /// `pre_install` finds them again, with the network off, when each
    /// task's commit is installed into its layer (matplotlib's qhull and
    /// FreeType sources).
    pub fn kept_downloads(&self) -> PathBuf {
        self.meta().join("downloads")
    }

    /// Downloads into [`Plan::wheelhouse`] what the repository at `commit`
    /// depends on, when its dependency files differ from the setup
    /// commit's (SWE-bench installs each task's commit with its
    /// dependencies; without the network this is done ahead). Once per
    /// commit.
    pub fn prepare_commit(
        &self,
        source: &Path,
        commit: &str,
        index: &Index,
        host: &sandbox::Host,
        scratch: &Path,
    ) -> Result<(), BuildError> {
        let done = self.wheelhouse().join(format!(".done-{commit}"));
        if done.exists() || commit == self.setup_commit {
            return Ok(());
        }
        let changed =
            crate::repo::paths_differ(source, &self.setup_commit, commit, DEPENDENCY_FILES)?;
        let Some(download) = download_command(&self.spec.install) else {
            return Ok(());
        };
        if changed {
            let checkout_dir = scratch.join(format!("deps-{}", &commit[..commit.len().min(12)]));
            let checkout = Workspace::create(source, commit, &checkout_dir)?;
            let mut policy = self.build_policy(checkout.path(), index, host)?;
            // The environment is complete: read-only from here on.
            policy.writable.retain(|p| p != &self.dir);
            policy.extra_ro_binds.push(self.dir.clone());
            let house = self.wheelhouse();
            std::fs::create_dir_all(&house).map_err(io("create", &house))?;
            policy.writable.push(house.clone());
            let mut script = String::from("set -euo pipefail\n");
            for cmd in &self.spec.pre_install {
                script += &format!("{cmd}\n");
            }
            script += &format!("{download} --dest {}\n", quote(&house.to_string_lossy()));
            tracing::info!(repo = %self.spec.repo, commit, "downloading the dependencies of a task commit");
            let outcome = sandbox::run(&policy, &["bash".into(), "-c".into(), script]);
            let _ = checkout.remove();
            let outcome = outcome?;
            let log = house.join(format!("download-{commit}.log"));
            std::fs::write(&log, &outcome.output).map_err(io("write", &log))?;
            if !outcome.success() {
                return Err(BuildError::Failed {
                    repo: self.spec.repo.clone(),
                    version: self.spec.version.clone(),
                    reason: format!(
                        "downloading the dependencies of {commit} failed{}",
                        pip_diagnosis(&outcome.output)
                            .map(|d| format!(": {d}"))
                            .unwrap_or_default()
                    ),
                    log,
                });
            }
        }
        let parent = done.parent().unwrap_or(&done).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(io("create", &parent))?;
        std::fs::write(&done, "").map_err(io("write", &done))?;
        Ok(())
    }
}

/// Files whose change between two commits may change what the repository
/// depends on.
pub const DEPENDENCY_FILES: &[&str] = &[
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "requirements.txt",
];

/// The spec's install command as a `pip download` of the same target
/// (`python -m pip install -e .[test]` → `python -m pip download .[test]`),
/// or `None` when it is not a pip install.
pub fn download_command(install: &str) -> Option<String> {
    let (head, rest) = install.split_once("pip install")?;
    let args: Vec<&str> = rest
        .split_whitespace()
        .filter(|a| *a != "-e" && *a != "--editable")
        .collect();
    Some(format!("{head}pip download {}", args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_commands_become_downloads() {
        let cases = [
            (
                "python -m pip install -e .",
                Some("python -m pip download ."),
            ),
            (
                "python -m pip install -e .[test]",
                Some("python -m pip download .[test]"),
            ),
            (
                "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
                Some("python -m pip download -v --no-use-pep517 --no-build-isolation ."),
            ),
            ("python setup.py develop", None),
        ];
        for (install, want) in cases {
            assert_eq!(download_command(install).as_deref(), want, "{install}");
        }
    }
}
