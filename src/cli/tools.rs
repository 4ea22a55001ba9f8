//! `aci` and `sandbox exec`: the agents' interface and the sandbox, driven
//! by hand.

use std::io::{BufRead, Write};

use anyhow::{bail, Context, Result};

use super::{AciArgs, ExecArgs, FetchWasiArgs};
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
    // The tier of `run`: a host that cannot sandbox at all still gets the
    // exploring commands (they run in-process); `run` then says why it
    // cannot run anything. A tier asked for by name must be ready.
    let unchecked = super::unchecked_host()?;
    let host = match (
        patchwright::inputs::preflight(unchecked.clone(), false, args.sandbox.or_auto()),
        args.sandbox.choice,
    ) {
        (Ok(host), _) => host,
        (Err(e), None) => {
            tracing::warn!(
                "{:#}; `run` will refuse every command",
                anyhow::Error::from(e)
            );
            unchecked
        }
        (Err(e), Some(_)) => return Err(e.into()),
    };
    let env = patchwright::env::task::TaskEnv::bare(&host);
    let mut interface = Aci::new(repo, &base, index, settings, env);
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
    // `timeout` and `docker run` do: the command never ran. The host's
    // tier first: it says why the host cannot sandbox (too old a
    // bubblewrap, no namespaces and no WASI runtime).
    let host = match super::sandbox_host(false, args.sandbox.or_auto()) {
        Ok(host) => host,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(SANDBOX_REFUSED);
        }
    };
    let outcome = match args
        .policy(&host)
        .and_then(|p| sandbox::run(&p, &args.command).map_err(|e| e.to_string()))
    {
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

/// `patchwright sandbox fetch-wasi`: the WASI tier's Python into the
/// program's cache (at once when it is there); prints its directory.
pub fn fetch_wasi(args: FetchWasiArgs) -> Result<i32> {
    let dir = patchwright::env::wasi::runtime::fetch(args.wheel.as_deref(), &|step| {
        tracing::info!("{step}")
    })?;
    println!("{}", dir.display());
    Ok(0)
}
