//! A task's layer over a built environment (see [`Layer`]).

use std::path::{Path, PathBuf};

use super::{io, BuildError};
use crate::env::Environment;

/// A task's own layer over a built environment: a virtualenv of the same
/// interpreter whose site-packages chains to the environment's (through a
/// `.pth` line), so the task can install its repository commit into it
/// while the environment stays read-only and shared. Console scripts of
/// the environment are re-pointed at the layer's interpreter. Made with
/// plain file writes: nothing runs.
pub struct Layer {
    pub dir: PathBuf,
}

impl Layer {
    /// Makes the layer at `dir` over `env`, replacing whatever is there.
    pub fn create(env: &Environment, dir: &Path) -> Result<Layer, BuildError> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io("remove", dir))?;
        }
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).map_err(io("create", &bin))?;
        let cfg = env.venv.join("pyvenv.cfg");
        std::fs::copy(&cfg, dir.join("pyvenv.cfg")).map_err(io("copy", &cfg))?;
        let env_python = env.venv.join("bin/python");
        let target = std::fs::canonicalize(&env_python).map_err(io("resolve", &env_python))?;
        let lib = env.venv.join("lib");
        let site_name = std::fs::read_dir(&lib)
            .map_err(io("read", &lib))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("python"))
            .ok_or_else(|| BuildError::Io {
                action: "find lib/pythonX.Y in",
                path: lib.clone(),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
        for name in ["python", "python3", site_name.as_str()] {
            let link = bin.join(name);
            std::os::unix::fs::symlink(&target, &link).map_err(io("link", &link))?;
        }
        let site = dir.join("lib").join(&site_name).join("site-packages");
        std::fs::create_dir_all(&site).map_err(io("create", &site))?;
        let base_site = lib.join(&site_name).join("site-packages");
        let pth = site.join("_patchwright_env.pth");
        std::fs::write(
            &pth,
            format!(
                "import site; site.addsitedir({:?})\n",
                base_site.to_string_lossy()
            ),
        )
        .map_err(io("write", &pth))?;
        let shebang = format!("#!{}", env.venv.join("bin").display());
        let layer_python = format!("#!{}", bin.join("python").display());
        for e in std::fs::read_dir(env.venv.join("bin"))
            .map_err(io("read", &env.venv))?
            .filter_map(|e| e.ok())
        {
            let dest = bin.join(e.file_name());
            if dest.exists() || !e.path().is_file() {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let Some((first, rest)) = text.split_once('\n') else {
                continue;
            };
            if let Some(tail) = first.strip_prefix(&shebang) {
                if tail.starts_with("/python") {
                    std::fs::write(&dest, format!("{layer_python}\n{rest}"))
                        .map_err(io("write", &dest))?;
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))
                        .map_err(io("chmod", &dest))?;
                }
            }
        }
        Ok(Layer {
            dir: dir.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_chains_to_its_environment_and_repoints_scripts(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let env_dir = dir.path().join("env");
        std::fs::create_dir_all(env_dir.join("bin"))?;
        std::fs::create_dir_all(env_dir.join("lib/python3.9/site-packages"))?;
        let interp = dir.path().join("python3.9");
        std::fs::write(&interp, "")?;
        std::os::unix::fs::symlink(&interp, env_dir.join("bin/python"))?;
        std::fs::write(
            env_dir.join("pyvenv.cfg"),
            format!("home = {}\nversion = 3.9.18\n", dir.path().display()),
        )?;
        let env_bin = env_dir.join("bin");
        std::fs::write(
            env_bin.join("pytest"),
            format!("#!{}/python\nimport pytest\n", env_bin.display()),
        )?;
        std::fs::write(env_bin.join("activate"), "# not a script of this python\n")?;
        let env = Environment::open(&env_dir)?;
        let layer = Layer::create(&env, &dir.path().join("layer"))?;
        let l = &layer.dir;
        assert_eq!(
            std::fs::read_link(l.join("bin/python3.9"))?,
            std::fs::canonicalize(&interp)?
        );
        let pth =
            std::fs::read_to_string(l.join("lib/python3.9/site-packages/_patchwright_env.pth"))?;
        assert_eq!(
            pth,
            format!(
                "import site; site.addsitedir({:?})\n",
                env.venv
                    .join("lib/python3.9/site-packages")
                    .display()
                    .to_string()
            )
        );
        let pytest = std::fs::read_to_string(l.join("bin/pytest"))?;
        assert_eq!(
            pytest,
            format!("#!{}/bin/python\nimport pytest\n", l.display())
        );
        assert!(!l.join("bin/activate").exists());
        assert_eq!(
            std::fs::read_to_string(l.join("pyvenv.cfg"))?,
            std::fs::read_to_string(env.venv.join("pyvenv.cfg"))?
        );
        Ok(())
    }
}
