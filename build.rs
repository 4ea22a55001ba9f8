//! Records the versions of the inference crates, read from Cargo.lock, so
//! that `run.json` can say exactly what produced a run.

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    for (krate, var) in [
        ("llama-cpp-2", "PATCHWRIGHT_LLAMA_CPP_2"),
        ("llama-cpp-sys-2", "PATCHWRIGHT_LLAMA_CPP_SYS_2"),
    ] {
        let needle = format!("name = \"{krate}\"\nversion = \"");
        let version = lock
            .find(&needle)
            .and_then(|i| lock[i + needle.len()..].split('"').next())
            .unwrap_or("unknown");
        println!("cargo:rustc-env={var}={version}");
    }
}
