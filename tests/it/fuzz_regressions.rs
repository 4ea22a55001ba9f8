//! Every saved fuzz crash (`fuzz/regressions/<target>/`) and every seed
//! (`fuzz/corpus/<target>/`) replayed through the fuzz target's body
//! (`patchwright::fuzzing`): CI cannot run libFuzzer for long, but a crash
//! once found and fixed must never come back.

use std::path::{Path, PathBuf};

use patchwright::fuzzing::TARGETS;

/// The files of `dir`, sorted; none when it does not exist.
fn inputs(dir: &Path) -> Result<Vec<PathBuf>, std::io::Error> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.is_file());
    files.sort();
    Ok(files)
}

/// Runs `target` on each file; the files whose input panicked, with the
/// panic's message.
fn replay(target: fn(&[u8]), files: &[PathBuf]) -> Result<Vec<String>, std::io::Error> {
    let mut failed = Vec::new();
    for file in files {
        let data = std::fs::read(file)?;
        if let Err(panic) = std::panic::catch_unwind(|| target(&data)) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("{}: {message}", file.display()));
        }
    }
    Ok(failed)
}

#[test]
fn saved_crashes_and_seeds_do_not_panic() -> Result<(), Box<dyn std::error::Error>> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut failed = Vec::new();
    for (name, target) in TARGETS {
        let seeds = inputs(&fuzz.join("corpus").join(name))?;
        // A target without seeds would pass this test having run nothing.
        assert!(!seeds.is_empty(), "fuzz/corpus/{name}/ has no seed inputs");
        let crashes = inputs(&fuzz.join("regressions").join(name))?;
        failed.extend(replay(*target, &seeds)?);
        failed.extend(replay(*target, &crashes)?);
    }
    assert!(
        failed.is_empty(),
        "inputs that panic:\n{}",
        failed.join("\n")
    );
    Ok(())
}

#[test]
fn every_target_has_a_fuzz_target_file() -> Result<(), Box<dyn std::error::Error>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    let mut names: Vec<String> = inputs(&dir)?
        .iter()
        .filter_map(|p| p.file_stem()?.to_str().map(str::to_string))
        .collect();
    names.sort();
    let mut expected: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    expected.sort();
    assert_eq!(names, expected);
    Ok(())
}

/// The replay must report an input that panics (else the test above
/// could not fail): a target that panics on inputs starting with `!`.
#[test]
fn replay_reports_a_panicking_input() -> Result<(), Box<dyn std::error::Error>> {
    fn target(data: &[u8]) {
        assert!(!data.starts_with(b"!"), "injected panic");
    }
    let dir = tempfile::tempdir()?;
    let (bad, good) = (dir.path().join("bad"), dir.path().join("good"));
    std::fs::write(&bad, "!boom")?;
    std::fs::write(&good, "fine")?;
    let failed = replay(target, &inputs(dir.path())?)?;
    assert_eq!(failed, vec![format!("{}: injected panic", bad.display())]);
    Ok(())
}
