//! `aci` and `sandbox exec`: the agents' interface and the sandbox, driven
//! by hand.

use std::io::{BufRead, Write};

use anyhow::{bail, Context, Result};

use super::{AciArgs, ExecArgs};
use patchwright::aci::{self, Aci, AciSettings, Command as AciCommand};
use patchwright_sandbox as sandbox;

/// `patchwright aci`: the agents' commands read from stdin, run on a repository.
pub fn aci(args: AciArgs) -> Result<i32> {
    if args.window == 0 {
        bail!("--window must be at least 1");
    }
    let repo = &args.repo;
    let base = patchwright::repo::head_commit(repo).with_context(|| {
        format!(
            "--repo {} must be a git work tree with a commit",
            repo.display()
        )
    })?;
    let index = patchwright::index::symbols::CodeIndex::build(repo)
        .with_context(|| format!("cannot index {}", repo.display()))?;
    let settings = AciSettings {
        window: args.window,
        run_timeout_s: args.run_timeout,
    };
    let mut interface = Aci::new(repo, &base, index, settings);
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    while let Some(text) = aci::command::read_command(&mut lines) {
        let text = text.context("cannot read stdin")?;
        let observation = match AciCommand::parse(&text) {
            Ok(command) => interface.execute(&command),
            Err(e) => aci::Observation {
                text: format!("Error: {e}"),
                submitted: false,
            },
        };
        writeln!(out, "{}", observation.text)?;
        out.flush()?;
        if observation.submitted {
            break;
        }
    }
    Ok(0)
}

/// Exit status of `sandbox exec` when the sandbox could not run the command.
const SANDBOX_REFUSED: i32 = 125;

/// `patchwright sandbox exec`: one command in the sandbox; its exit status.
pub fn sandbox_exec(args: ExecArgs) -> Result<i32> {
    // Every refusal (bad flags, bad directory, no sandbox) exits 125, as
    // `timeout` and `docker run` do: the command never ran.
    let outcome = match args.policy().and_then(|p| {
        sandbox::run(&p, &args.command).map_err(|e| match e {
            // Say why the host cannot sandbox (too old a bubblewrap, no
            // namespaces) when the default policy's check finds it.
            sandbox::SandboxError::BwrapNotFound { .. }
            | sandbox::SandboxError::SetupFailed { .. } => match super::preflight(false) {
                Err(host) => format!("{host:#}"),
                Ok(()) => e.to_string(),
            },
            e => e.to_string(),
        })
    }) {
        Ok(o) => o,
        Err(message) => {
            eprintln!("error: {message}");
            return Ok(SANDBOX_REFUSED);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(outcome.output.as_bytes())?;
        out.flush()?;
        if outcome.bytes_omitted > 0 {
            tracing::warn!(
                "{} bytes of output omitted from the middle",
                outcome.bytes_omitted
            );
        }
        if outcome.timed_out {
            tracing::warn!("timed out after {:.1}s", outcome.wall_time_secs);
        } else if let Some(sig) = &outcome.signal {
            tracing::warn!("killed by {}", sig.name);
        }
    }
    Ok(outcome.cli_exit_code())
}
