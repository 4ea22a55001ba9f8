//! `pack`: a bundle for a machine with no network, and `pack --check`.

use anyhow::{bail, Context, Result};

use super::PackArgs;
use patchwright::bundle::pack::{pack as write_bundle, PackOptions};
use patchwright::bundle::Bundle;
use patchwright::dataset::{self, Selection};
use patchwright::env::build::Pythons;
use patchwright::env::spec::Specs;
use patchwright::repo::Repos;

/// `patchwright pack`: 1 when a piece could not be packed (or, with
/// `--check`, a file is damaged).
pub fn pack(args: PackArgs) -> Result<i32> {
    if let Some(root) = &args.check {
        return check(root, args.json);
    }
    let (Some(dataset_path), Some(repos_dir), Some(out)) = (&args.dataset, &args.repos, &args.out)
    else {
        bail!("--dataset, --repos and --out are required (or --check BUNDLE)");
    };
    let tasks = dataset::load(dataset_path)?;
    let selection = Selection {
        filter: args
            .filter
            .as_deref()
            .map(regex::Regex::new)
            .transpose()
            .context("--filter is not a valid regular expression")?,
        ..Selection::default()
    };
    let tasks = selection.apply(tasks);
    if tasks.is_empty() {
        bail!("no task of {} is selected", dataset_path.display());
    }
    if !repos_dir.is_dir() {
        bail!("--repos {}: not a directory", repos_dir.display());
    }
    // The downloads run in the sandbox with the network kept: bubblewrap
    // (the WASI tier runs no pip).
    let host = super::sandbox_host(true, patchwright::config::SandboxChoice::Bubblewrap)?;
    let specs = Specs::load(args.specs.as_deref())?;
    let pythons = Pythons::discover(&args.pythons);
    let repos = Repos::new(repos_dir)?;
    let pip_cache = patchwright::dirs::envs_dir().join(".pip-cache");
    let models_dir = patchwright::models::models_dir()?;
    let opts = PackOptions {
        dataset: dataset_path,
        tasks: &tasks,
        repos: &repos,
        models: &args.models,
        models_dir: &models_dir,
        specs: &specs,
        pythons: &pythons,
        pip_cache: &pip_cache,
        host: &host,
    };
    let report = write_bundle(&opts, out, &|msg| eprintln!("pack: {msg}"))?;
    for bad in &report.replaced {
        eprintln!(
            "replaced the damaged {}: {}",
            bad.path.display(),
            bad.problem
        );
    }
    if report.added.is_empty() {
        eprintln!(
            "nothing to add: every piece was already packed ({} kept)",
            report.kept
        );
    } else {
        for a in &report.added {
            eprintln!("added {a}");
        }
    }
    for e in &report.errors {
        eprintln!("FAILED {e}");
    }
    let tar = if args.tar {
        let tar = out.with_extension("tar");
        let parent = report
            .bundle
            .parent()
            .context("the bundle has no parent directory")?;
        let name = report
            .bundle
            .file_name()
            .context("the bundle has no name")?;
        let status = std::process::Command::new("tar")
            .arg("-cf")
            .arg(&tar)
            .arg("-C")
            .arg(parent)
            .arg(name)
            .status()
            .context("cannot run tar")?;
        if !status.success() {
            bail!("tar -cf {} failed ({status})", tar.display());
        }
        Some(tar)
    } else {
        None
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_sizes(&report.sizes);
        println!("{}", report.bundle.display());
        if let Some(t) = &tar {
            println!("{}", t.display());
        }
    }
    eprintln!(
        "{} files in {:.0} s, {} pieces added, {} kept, {} failed",
        report.files,
        report.seconds,
        report.added.len(),
        report.kept,
        report.errors.len()
    );
    Ok(if report.errors.is_empty() { 0 } else { 1 })
}

/// `patchwright pack --check BUNDLE`.
fn check(root: &std::path::Path, json: bool) -> Result<i32> {
    let bundle = Bundle::open(root)?;
    let bad = bundle.manifest.verify(&bundle.root, &[]);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "bundle": bundle.root, "files": bundle.manifest.files.len(),
                "sizes": bundle.manifest.sizes(), "bad": bad,
            }))?
        );
    } else {
        print_sizes(&bundle.manifest.sizes());
        for b in &bad {
            println!("BAD {}: {}", b.path.display(), b.problem);
        }
    }
    eprintln!(
        "{}: {} files, {}",
        bundle.root.display(),
        bundle.manifest.files.len(),
        if bad.is_empty() {
            "all intact".to_string()
        } else {
            format!("{} missing or changed", bad.len())
        }
    );
    Ok(if bad.is_empty() { 0 } else { 1 })
}

fn print_sizes(sizes: &std::collections::BTreeMap<String, u64>) {
    let total: u64 = sizes.values().sum();
    for (part, bytes) in sizes {
        println!("{part:<10} {:>10.1} MB", *bytes as f64 / 1e6);
    }
    println!("{:<10} {:>10.1} MB", "total", total as f64 / 1e6);
}
