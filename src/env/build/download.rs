//! Packing an environment for a machine without the network: every
//! distribution its build installs, downloaded (with the network, in the
//! sandbox) into one directory of wheels that the offline build installs
//! from (`--no-index --find-links`). Used by `patchwright pack`.
//!
//! The download follows the build recipe step by step in a scratch
//! virtualenv of the same interpreter: each step's requirements are
//! downloaded, every sdist among them is built into a wheel (so the
//! offline machine builds nothing but the repository), and the step is
//! then installed into the scratch virtualenv *from the directory alone*,
//! network or not, which proves the step installs offline and gives the
//! next step (a `setup.py` that imports numpy, say) what it needs. The
//! repository's own install is downloaded, not installed: it compiles, and
//! the offline build does it.

use std::path::{Path, PathBuf};

use patchwright_sandbox as sandbox;

use super::wheelhouse::download_command;
use super::{git_safe, io, one_line, pip_diagnosis, quote, BuildError, Plan};
use crate::repo::Workspace;

/// The scratch virtualenv inside the sandbox's private /tmp.
const SCRATCH_VENV: &str = "/tmp/patchwright-download-venv";

impl Plan {
    /// Downloads into `house` what building this environment installs
    /// (see the module's description). `scratch` holds the checkout of the
    /// setup commit and the step files; `cache` is pip's cache.
    pub fn download(
        &self,
        source: &Path,
        house: &Path,
        downloads: &Path,
        scratch: &Path,
        cache: &Path,
        host: &sandbox::Host,
    ) -> Result<(), BuildError> {
        let inputs = self.write_inputs(scratch)?;
        let checkout_dir = scratch.join(format!("checkout-{}", &self.hash[..12]));
        let checkout = Workspace::create(source, &self.setup_commit, &checkout_dir)?;
        let mut s = self.download_prelude(house);
        s += &self.steps(&inputs, true);
        if let Some(download) = download_command(&self.spec.install) {
            s += &self.install_download(&download);
        }
        let result = self.run_download(
            checkout.path(),
            house,
            downloads,
            std::slice::from_ref(&inputs),
            cache,
            s,
            "setup",
            host,
        );
        let _ = checkout.remove();
        result
    }

    /// Downloads into `house` what the repository at `commit` depends on
    /// when its dependency files differ from the setup commit's (what
    /// [`Plan::prepare_commit`] does on a machine with the network).
    /// Returns whether there was anything to download.
    #[allow(clippy::too_many_arguments)]
    pub fn download_commit(
        &self,
        source: &Path,
        commit: &str,
        house: &Path,
        downloads: &Path,
        scratch: &Path,
        cache: &Path,
        host: &sandbox::Host,
    ) -> Result<bool, BuildError> {
        if commit == self.setup_commit {
            return Ok(false);
        }
        let changed =
            crate::repo::paths_differ(source, &self.setup_commit, commit, super::DEPENDENCY_FILES)?;
        let Some(download) = download_command(&self.spec.install) else {
            return Ok(false);
        };
        if !changed {
            return Ok(false);
        }
        let checkout_dir = scratch.join(format!("deps-{}", &commit[..commit.len().min(12)]));
        let checkout = Workspace::create(source, commit, &checkout_dir)?;
        let inputs = self.write_inputs(scratch)?;
        let mut s = self.download_prelude(house);
        // What the build installed before the install step, from the
        // directory: a `setup.py` may import it.
        s += &self.steps(&inputs, false);
        s += &self.install_download(&download);
        let result = self.run_download(
            checkout.path(),
            house,
            downloads,
            &[inputs],
            cache,
            s,
            commit,
            host,
        );
        let _ = checkout.remove();
        result.map(|()| true)
    }

    /// The build's step files (requirements, build requirements, pinned
    /// packages), written under `scratch`.
    fn write_inputs(&self, scratch: &Path) -> Result<PathBuf, BuildError> {
        let inputs = scratch.join(format!("inputs-{}", &self.hash[..12]));
        std::fs::create_dir_all(&inputs).map_err(io("create", &inputs))?;
        self.write_step_files(&inputs)?;
        Ok(inputs)
    }

    /// The build's steps before `pre_install`, each installed into the
    /// scratch virtualenv from the directory alone; downloaded first when
    /// `fetch`.
    fn steps(&self, inputs: &Path, fetch: bool) -> String {
        let mut s = String::new();
        for (step, file, nonempty) in [
            ("pip", "pip.txt", self.spec.pip.is_some()),
            (
                "requirements",
                "requirements.txt",
                !self.requirements.is_empty(),
            ),
            ("build-requires", "build-requires.txt", true),
            (
                "pip_packages",
                "pip-packages.txt",
                !self.spec.pip_packages.is_empty(),
            ),
        ] {
            if nonempty {
                let f = quote(&inputs.join(file).to_string_lossy());
                s += &format!("step {step}\n");
                if fetch {
                    s += &format!("fetch -r {f}\n");
                }
                s += &format!("offline install -r {f}\n");
            }
        }
        s
    }

    /// `pre_install` in the checkout, then the install target's
    /// dependencies downloaded (`download`, the install as `pip
    /// download`) and built into wheels.
    fn install_download(&self, download: &str) -> String {
        let mut s = String::new();
        for cmd in &self.spec.pre_install {
            s += &format!(
                "step {}\n{cmd}\n",
                quote(&format!("pre_install: {}", one_line(cmd)))
            );
        }
        s += &format!(
            "step {}\n{download} --dest \"$H\" --find-links \"$H\"\nwheels\n",
            quote(&format!("install (downloaded): {download}"))
        );
        s
    }

    /// The start of a download script: the scratch virtualenv and the
    /// helpers `fetch` (download, then build sdists into wheels), `wheels`
    /// and `offline` (pip with the directory as its only index).
    fn download_prelude(&self, house: &Path) -> String {
        let venv = SCRATCH_VENV;
        let mut s = String::from("set -euo pipefail\nstep() { echo; echo \">>>>> step: $*\"; }\n");
        s += &format!("H={}\n", quote(&house.to_string_lossy()));
        s += &format!(
            "step venv\n{} -m venv {venv}\n",
            quote(&self.interpreter.executable.to_string_lossy())
        );
        s += &format!("pip() {{ {venv}/bin/python -m pip \"$@\"; }}\n");
        s += r#"wheels() {
  for f in "$H"/*.tar.gz "$H"/*.zip "$H"/*.tar.bz2 "$H"/*.tgz; do
    [ -e "$f" ] || continue
    if pip wheel --no-deps --wheel-dir "$H" "$f"; then rm -f "$f"; else echo "kept the sdist $f (no wheel could be built)"; fi
  done
}
fetch() { pip download --dest "$H" --find-links "$H" "$@"; wheels; }
offline() { PIP_NO_INDEX=1 PIP_FIND_LINKS="$H" pip "$@"; }
"#;
        s
    }

    // The directories of one download step, each bound differently.
    #[allow(clippy::too_many_arguments)]
    fn run_download(
        &self,
        worktree: &Path,
        house: &Path,
        downloads: &Path,
        inputs: &[PathBuf],
        cache: &Path,
        script: String,
        what: &str,
        host: &sandbox::Host,
    ) -> Result<(), BuildError> {
        std::fs::create_dir_all(house).map_err(io("create", house))?;
        std::fs::create_dir_all(cache).map_err(io("create", cache))?;
        let mut policy = sandbox::Policy::for_worktree(worktree, host)?;
        policy.extra_ro_binds.push(self.interpreter.prefix.clone());
        crate::env::allow_python_prefix(&mut policy, &self.interpreter.prefix);
        policy.extra_ro_binds.extend(inputs.iter().cloned());
        policy.writable.push(house.to_path_buf());
        policy.writable.push(cache.to_path_buf());
        policy.allow_network();
        if !self.spec.downloads.is_empty() {
            for d in &self.spec.downloads {
                super::fetch_download(d, downloads)?;
            }
            policy.extra_ro_binds.push(downloads.to_path_buf());
            policy.env.insert(
                crate::env::spec::DOWNLOADS_ENV.into(),
                downloads.display().to_string(),
            );
        }
        for (k, v) in [
            ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
            ("PIP_NO_INPUT", "1"),
            ("PIP_PROGRESS_BAR", "off"),
        ] {
            policy.env.insert(k.into(), v.into());
        }
        policy
            .env
            .insert("PIP_CACHE_DIR".into(), cache.display().to_string());
        policy.env.insert(
            "PATH".into(),
            format!("{SCRATCH_VENV}/bin:{}", sandbox::DEFAULT_PATH),
        );
        policy
            .env
            .insert("VIRTUAL_ENV".into(), SCRATCH_VENV.to_string());
        for (k, v) in &self.spec.vars {
            policy.env.insert(k.clone(), v.clone());
        }
        git_safe(&mut policy);
        policy.limits.timeout_ms = super::BUILD_TIMEOUT_S * 1000;
        policy.limits.memory_bytes = super::BUILD_MEMORY_BYTES;
        policy.limits.tmp_bytes = super::BUILD_TMP_BYTES;
        policy.limits.output_bytes = super::BUILD_OUTPUT_BYTES;
        tracing::info!(repo = %self.spec.repo, version = %self.spec.version, what, "downloading an environment's packages");
        let outcome = sandbox::run(&policy, &["bash".into(), "-c".into(), script])?;
        let logs = house.join(".patchwright");
        std::fs::create_dir_all(&logs).map_err(io("create", &logs))?;
        let log = logs.join(format!("download-{what}.log"));
        std::fs::write(&log, &outcome.output).map_err(io("write", &log))?;
        if outcome.success() {
            return Ok(());
        }
        let step = outcome
            .output
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(">>>>> step: "))
            .unwrap_or("?")
            .to_string();
        let mut reason = format!(
            "downloading ({what}): step `{step}` exited with status {}",
            outcome.cli_exit_code()
        );
        if outcome.timed_out {
            reason = format!("downloading ({what}) timed out in step `{step}`");
        }
        if let Some(why) = pip_diagnosis(&outcome.output) {
            reason += &format!(": {why}");
        }
        Err(BuildError::Failed {
            repo: self.spec.repo.clone(),
            version: self.spec.version.clone(),
            reason,
            log,
        })
    }
}
