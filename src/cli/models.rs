//! `models` and `generate`: the model files, and one prompt to a model.

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;

use super::GenerateArgs;
use patchwright::backing;
use patchwright::engine::http::ServerSettings;
use patchwright::engine::{self, EngineSettings, Sampling};
use patchwright::models;

/// A row of `models list`: the file's listing, and where the engine
/// would put its layers with the default `[engine]` settings on this
/// machine's GPUs (none: all on the CPU).
#[derive(serde::Serialize)]
struct Row {
    #[serde(flatten)]
    listing: models::Listing,
    /// Layers (blocks + output) that would be offloaded, and of how many.
    gpu_layers: Option<u32>,
    layers: Option<u32>,
    /// Bytes of f16 KV cache per token, from the header's attention keys.
    kv_bytes_per_token: Option<u64>,
    /// The KV budget that `kv_budget = "auto"` would give.
    kv_budget: Option<u64>,
}

/// `patchwright models list`: the known models, as a table or JSON, with
/// the GPUs of this build and where each present model's layers would go.
pub fn list(json: bool) -> Result<i32> {
    let settings = EngineSettings::default();
    let gpus = engine::gpus()?;
    let mut rows = Vec::new();
    for listing in models::list(&models::models_dir()?)? {
        let placement = if listing.present {
            let plan = engine::plan(&listing.path, &settings)?;
            plan.shape.map(|shape| plan.placement(&shape, &settings))
        } else {
            None
        };
        rows.push(Row {
            listing,
            gpu_layers: placement.as_ref().map(|p| p.gpu_layers),
            layers: placement.as_ref().map(|p| p.layers),
            kv_bytes_per_token: placement.as_ref().map(|p| p.kv_bytes_per_token),
            kv_budget: placement.as_ref().map(|p| p.kv_budget),
        });
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    if gpus.is_empty() {
        println!("GPUs: none (a CPU-only build, or no device found): layers run on the CPU");
    } else {
        for (i, d) in gpus.iter().enumerate() {
            println!(
                "GPU {i}: {} ({}), {:.1} of {:.1} GiB free",
                d.name,
                d.description,
                d.memory_free as f64 / f64::from(1u32 << 30),
                d.memory_total as f64 / f64::from(1u32 << 30)
            );
        }
    }
    println!(
        "{:<22} {:<8} {:<10} {:>9} {:>8} {:<8} {:<8} {:>7} {:>9} PATH",
        "NAME", "PRESENT", "ARCH", "SIZE", "CONTEXT", "QUANT", "PARAMS", "GPU", "KV/TOKEN"
    );
    for row in rows {
        let m = row.listing;
        let dash = || "-".to_string();
        println!(
            "{:<22} {:<8} {:<10} {:>9} {:>8} {:<8} {:<8} {:>7} {:>9} {}{}",
            m.name,
            if m.present { "yes" } else { "no" },
            m.architecture.unwrap_or_else(dash),
            m.size
                .map_or_else(dash, |s| format!("{:.0} MiB", s as f64 / (1 << 20) as f64)),
            m.context_length.map_or_else(dash, |c| c.to_string()),
            m.quantization.unwrap_or_else(dash),
            m.parameters.unwrap_or_else(dash),
            match (row.gpu_layers, row.layers) {
                (Some(g), Some(l)) => format!("{g}/{l}"),
                _ => dash(),
            },
            row.kv_bytes_per_token
                .map_or_else(dash, |b| format!("{:.0} KiB", b as f64 / 1024.0)),
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
    let path = models::fetch(&models::models_dir()?, name, &|step| {
        spinner.set_message(step.to_string());
        spinner.suspend(|| tracing::info!("{step}"));
    })?;
    spinner.finish_and_clear();
    println!("{}", path.display());
    Ok(0)
}

/// `patchwright generate`: one prompt, its candidates on stdout.
/// `patchwright models synth`: a synthetic model of a real one's shape.
pub fn synth(args: super::SynthArgs) -> Result<i32> {
    use patchwright::models::synth::{self, Quant, Shape};
    let shape = Shape::named(&args.shape)?;
    let quant: Quant = args.quant.parse()?;
    let like = args.like.as_deref().map(synth::read_layout).transpose()?;
    let started = std::time::Instant::now();
    let written = synth::write(
        &shape,
        quant,
        like.as_ref(),
        &args.tokenizer,
        args.seed,
        &args.out,
    )?;
    eprintln!(
        "{}: {} tensors, {:.2} GB of weights in {:.0} s",
        shape.name,
        written.tensors,
        written.bytes as f64 / 1e9,
        started.elapsed().as_secs_f64()
    );
    println!("{}", args.out.display());
    Ok(0)
}

/// `--gpu-layers`: auto, all, none or a number.
fn gpu_layers(value: &str) -> Result<engine::GpuLayers> {
    Ok(match value.parse::<u32>() {
        Ok(n) => engine::GpuLayers::Count(n),
        Err(_) => serde_json::from_value(serde_json::Value::String(value.to_string()))
            .with_context(|| format!("--gpu-layers {value} (auto, all, none or a number)"))?,
    })
}

/// `patchwright models bench`: the engine's speed on one model, in one
/// process.
pub fn bench(args: super::BenchArgs) -> Result<i32> {
    use engine::bench;
    let grammar = match &args.grammar {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read grammar file {}", path.display()))?,
        None => bench::FIXER_SHAPE_GRAMMAR.to_string(),
    };
    let settings = EngineSettings {
        context: args.context,
        threads: args.threads,
        gpu_layers: gpu_layers(&args.gpu_layers)?,
        prompt_lookup: false,
        jump_forward: false,
        ..EngineSettings::default()
    };
    let model = models::resolve(&models::models_dir()?, &args.model)?;
    let engine = engine::Engine::load(&model.path, &settings)?;
    let plan = bench::Plan {
        prompts: args.prompts,
        generation_prompt: args.generation_prompt,
        candidates: args.candidates,
        max_tokens: args.max_tokens,
        grammar,
        seed: args.seed,
        conversations: args.conversations.into_iter().filter(|&k| k > 0).collect(),
        scheduler_candidates: args.scheduler_candidates,
    };
    let report = bench::run(&engine, &plan, |line| tracing::info!("{line}"))
        .with_context(|| format!("benchmark of {}", model.path.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", bench_table(&report));
    }
    Ok(0)
}

/// The figures as Markdown tables.
fn bench_table(r: &engine::bench::Report) -> String {
    let p = &r.placement;
    let device = p.devices.first().map_or("the GPU", |d| d.name.as_str());
    let mut out = format!(
        "{} ({:.2} GB): {}/{} layers on {}, KV budget {:.1} GiB\n\n\
         | prompt tokens | tokens/s |\n| ---: | ---: |\n",
        r.model.display(),
        r.file_bytes as f64 / 1e9,
        p.gpu_layers,
        p.layers,
        device,
        p.kv_budget as f64 / f64::from(1u32 << 30),
    );
    for f in &r.prompt {
        out.push_str(&format!("| {} | {:.1} |\n", f.tokens, f.tokens_per_s));
    }
    out.push_str("\n| N | grammar | tokens/s | steps/s |\n| ---: | --- | ---: | ---: |\n");
    for f in &r.generation {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} |\n",
            f.candidates,
            if f.grammar { "on" } else { "off" },
            f.tokens_per_s,
            f.steps_per_s
        ));
    }
    if !r.scheduler.is_empty() {
        out.push_str(
            "\n| K × N | tokens/s | forward passes per step (decoding only) | busy | decoding s | sampling s |\n\
             | --- | ---: | ---: | ---: | ---: | ---: |\n",
        );
    }
    for f in &r.scheduler {
        out.push_str(&format!(
            "| {} × {} | {:.1} | {:.2} ({:.2}) | {:.0}% | {:.1} | {:.1} |\n",
            f.conversations,
            f.candidates,
            f.tokens_per_s,
            f.micro_batches as f64 / f.steps.max(1) as f64,
            f.decode_micro_batches as f64 / f.decode_steps.max(1) as f64,
            f.busy_fraction * 100.0,
            f.decoding_s,
            f.sampling_s
        ));
    }
    for skipped in &r.scheduler_skipped {
        out.push_str(&format!("\nleft out: {skipped}\n"));
    }
    out
}

/// `patchwright models tokenizer`: a model's tokenizer as a small GGUF.
pub fn tokenizer(model: &std::path::Path, out: &std::path::Path) -> Result<i32> {
    patchwright::models::synth::write_tokenizer(model, out)?;
    println!("{}", out.display());
    Ok(0)
}

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
    let gpu_layers = gpu_layers(&args.gpu_layers)?;
    let kind = serde_json::from_value(serde_json::Value::String(args.engine.clone()))
        .with_context(|| format!("--engine {} (llama or candle)", args.engine))?;
    let engine = EngineSettings {
        kind,
        context: args.context,
        threads: args.threads,
        gpu_layers,
        prompt_lookup: !args.no_drafts,
        jump_forward: !args.no_drafts,
        ..EngineSettings::default()
    };
    let server = ServerSettings {
        kind: args.server_kind,
        api_key_env: args.api_key_env.clone(),
        ..ServerSettings::default()
    };
    let backend = backing::open::<anyhow::Error>(
        &models::models_dir()?,
        args.model.as_deref(),
        args.server.as_deref(),
        &server,
        &engine,
    )?;
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        min_p: args.min_p,
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
                "tokens": generation.candidates.iter().map(|c| c.tokens.as_slice()).collect::<Vec<_>>(),
                "stats": generation.stats,
                "placement": backend.placement(),
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
