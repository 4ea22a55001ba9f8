//! `models` and `generate`: the model files, and one prompt to a model.

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;

use super::GenerateArgs;
use patchwright::engine::http::ServerSettings;
use patchwright::engine::{backing, EngineSettings, Sampling};
use patchwright::models;

/// `patchwright models list`: the known models, as a table or JSON.
pub fn list(json: bool) -> Result<i32> {
    let listing = models::list()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&listing)?);
        return Ok(0);
    }
    println!(
        "{:<22} {:<8} {:<10} {:>9} {:>8} {:<8} {:<8} PATH",
        "NAME", "PRESENT", "ARCH", "SIZE", "CONTEXT", "QUANT", "PARAMS"
    );
    for m in listing {
        let dash = || "-".to_string();
        println!(
            "{:<22} {:<8} {:<10} {:>9} {:>8} {:<8} {:<8} {}{}",
            m.name,
            if m.present { "yes" } else { "no" },
            m.architecture.unwrap_or_else(dash),
            m.size
                .map_or_else(dash, |s| format!("{:.0} MiB", s as f64 / (1 << 20) as f64)),
            m.context_length.map_or_else(dash, |c| c.to_string()),
            m.quantization.unwrap_or_else(dash),
            m.parameters.unwrap_or_else(dash),
            m.path.display(),
            if m.default { "  (default)" } else { "" },
        );
    }
    Ok(0)
}

/// `patchwright models fetch`: downloads a model, printing its path.
pub fn fetch(name: &str) -> Result<i32> {
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    let path = models::fetch(name, &|step| {
        spinner.set_message(step.to_string());
        spinner.suspend(|| tracing::info!("{step}"));
    })?;
    spinner.finish_and_clear();
    println!("{}", path.display());
    Ok(0)
}

/// `patchwright generate`: one prompt, its candidates on stdout.
pub fn generate(args: GenerateArgs) -> Result<i32> {
    if args.n == 0 {
        bail!("--n must be at least 1");
    }
    let grammar = match &args.grammar {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read grammar file {}", path.display()))?,
        ),
        None => None,
    };
    let engine = EngineSettings {
        context: args.context,
        threads: args.threads,
        ..EngineSettings::default()
    };
    let server = ServerSettings {
        kind: args.server_kind,
        api_key_env: args.api_key_env.clone(),
        ..ServerSettings::default()
    };
    let backend = backing::open::<anyhow::Error>(
        args.model.as_deref(),
        args.server.as_deref(),
        &server,
        &engine,
    )?;
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        seed: args.seed,
        max_tokens: args.max_tokens,
    };
    let generation = backing::ask(
        backend.as_ref(),
        args.system,
        args.prompt,
        sampling,
        args.n,
        grammar.as_deref(),
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "candidates": generation.candidates.iter().map(|c| c.text.as_str()).collect::<Vec<_>>(),
                "stats": generation.stats,
            }))?
        );
    } else {
        for (i, c) in generation.candidates.iter().enumerate() {
            if args.n > 1 {
                println!(
                    "=== candidate {} ({} tokens, {:?}) ===",
                    i + 1,
                    c.tokens.len(),
                    c.stop
                );
            }
            println!("{}", c.text);
        }
        let s = &generation.stats;
        tracing::info!(
            "{} prompt tokens ({} evaluated) in {:.2}s, {:?} generated in {:.2}s",
            s.prompt_tokens,
            s.prompt_tokens_evaluated,
            s.prompt_s,
            s.generated_tokens,
            s.decode_s
        );
    }
    Ok(0)
}
