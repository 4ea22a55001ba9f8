//! Rewriting the run-time library search path (`DT_RUNPATH`/`DT_RPATH`) of
//! an ELF file in place, so that an interpreter built with
//! `--enable-shared` (pyenv's default: `bin/python3.9` finds
//! `libpython3.9.so` through an absolute RUNPATH) finds its libraries
//! relative to itself (`$ORIGIN/../lib`) wherever its tree is copied.
//!
//! The new value is written over the old one in the dynamic string table
//! and padded with NULs, so it must not be longer; no section moves, so the
//! file stays valid. Only 64-bit little-endian files (x86-64, aarch64 Linux)
//! are read; anything else is left alone.

use std::path::Path;

const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_RPATH: i64 = 15;
const DT_RUNPATH: i64 = 29;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElfError {
    #[error("truncated or malformed ELF file ({0})")]
    Malformed(&'static str),
    #[error(
        "the new search path `{new}` is longer than the old `{old}`: it cannot be written in place"
    )]
    TooLong { old: String, new: String },
}

/// The search path entries of `data` (an ELF file's bytes), with the file
/// offset and length of the string each `DT_RUNPATH`/`DT_RPATH` points at.
/// `Ok(None)` when `data` is not a 64-bit little-endian ELF file.
pub fn search_paths(data: &[u8]) -> Result<Option<Vec<(usize, String)>>, ElfError> {
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        return Ok(None);
    }
    let u16_at = |o: usize| -> Result<u64, ElfError> {
        data.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as u64)
            .ok_or(ElfError::Malformed("header"))
    };
    let u32_at = |o: usize| -> Result<u32, ElfError> {
        data.get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or(ElfError::Malformed("program header"))
    };
    let u64_at = |o: usize| -> Result<u64, ElfError> {
        data.get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or(ElfError::Malformed("dynamic section"))
    };
    // Executables and shared objects only: an object file (`python.o`)
    // has no dynamic section.
    if !matches!(u16_at(0x10)?, 2 | 3) {
        return Ok(None);
    }
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    if phentsize < 56 {
        return Err(ElfError::Malformed("program header size"));
    }
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let h = phoff + i * phentsize;
        let kind = u32_at(h)?;
        let (offset, vaddr, filesz) = (u64_at(h + 8)?, u64_at(h + 16)?, u64_at(h + 32)?);
        match kind {
            PT_LOAD => loads.push((offset, vaddr, filesz)),
            PT_DYNAMIC => dynamic = Some((offset as usize, filesz as usize)),
            _ => {}
        }
    }
    let Some((dyn_off, dyn_size)) = dynamic else {
        return Ok(Some(Vec::new()));
    };
    let mut strtab = None;
    let mut paths = Vec::new();
    for i in 0..dyn_size / 16 {
        let tag = u64_at(dyn_off + i * 16)? as i64;
        let val = u64_at(dyn_off + i * 16 + 8)?;
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(val),
            DT_RPATH | DT_RUNPATH => paths.push(val as usize),
            _ => {}
        }
    }
    if paths.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let strtab = strtab.ok_or(ElfError::Malformed("no string table"))?;
    let file_off = loads
        .iter()
        .find(|(_, vaddr, filesz)| *vaddr <= strtab && strtab < vaddr + filesz)
        .map(|(offset, vaddr, _)| (strtab - vaddr + offset) as usize)
        .ok_or(ElfError::Malformed(
            "string table outside the loaded segments",
        ))?;
    paths
        .into_iter()
        .map(|p| {
            let start = file_off + p;
            let rest = data
                .get(start..)
                .ok_or(ElfError::Malformed("search path"))?;
            let end = rest
                .iter()
                .position(|b| *b == 0)
                .ok_or(ElfError::Malformed("unterminated search path"))?;
            Ok((start, String::from_utf8_lossy(&rest[..end]).into_owned()))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Rewrites in `data` every search path entry for which `map` returns a new
/// value; returns whether anything changed.
pub fn rewrite_search_paths(
    data: &mut [u8],
    map: &dyn Fn(&str) -> Option<String>,
) -> Result<bool, ElfError> {
    let Some(paths) = search_paths(data)? else {
        return Ok(false);
    };
    let mut changed = false;
    for (start, old) in paths {
        let entries: Vec<String> = old
            .split(':')
            .map(|e| map(e).unwrap_or_else(|| e.to_string()))
            .collect();
        let new = entries.join(":");
        if new == old {
            continue;
        }
        if new.len() > old.len() {
            return Err(ElfError::TooLong { old, new });
        }
        data[start..start + new.len()].copy_from_slice(new.as_bytes());
        data[start + new.len()..start + old.len()].fill(0);
        changed = true;
    }
    Ok(changed)
}

/// `$ORIGIN`-relative form of `target` as seen from a file in `dir` (both
/// relative to the same root).
pub fn origin_relative(dir: &Path, target: &Path) -> String {
    let from: Vec<_> = dir.components().collect();
    let to: Vec<_> = target.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts = vec!["$ORIGIN".to_string()];
    parts.extend(std::iter::repeat_n("..".to_string(), from.len() - common));
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_relative_paths() {
        let cases = [
            ("bin", "lib", "$ORIGIN/../lib"),
            ("lib", "lib", "$ORIGIN"),
            ("lib/python3.9/lib-dynload", "lib", "$ORIGIN/../.."),
            ("", "lib", "$ORIGIN/lib"),
        ];
        for (dir, target, want) in cases {
            assert_eq!(
                origin_relative(Path::new(dir), Path::new(target)),
                want,
                "{dir}"
            );
        }
    }

    #[test]
    fn not_elf_is_left_alone() {
        let mut data = b"#!/bin/sh\necho hi\n".to_vec();
        assert_eq!(search_paths(&data), Ok(None));
        assert_eq!(
            rewrite_search_paths(&mut data, &|_| Some("x".into())),
            Ok(false)
        );
    }

    /// A real executable linked with an absolute RUNPATH (the C compiler
    /// llama.cpp's build needs): its path read, rewritten, and the program
    /// still runs, finding nothing it needs there.
    #[test]
    fn a_linked_runpath_is_read_and_rewritten() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let src = dir.path().join("m.c");
        std::fs::write(&src, "int main(void) { return 7; }\n")?;
        let exe = dir.path().join("m");
        let long = "/opt/some/long/prefix/for/python/3.9.18/lib";
        let out = std::process::Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .arg(format!("-Wl,-rpath,{long}:/usr/lib"))
            .arg("-Wl,--enable-new-dtags")
            .output()?;
        assert!(
            out.status.success(),
            "cc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut data = std::fs::read(&exe)?;
        let paths = search_paths(&data)?.ok_or("not ELF")?;
        assert_eq!(paths.len(), 1);
        assert_eq!(paths[0].1, format!("{long}:/usr/lib"));
        let changed = rewrite_search_paths(&mut data, &|e| {
            e.starts_with("/opt/").then(|| "$ORIGIN/../lib".to_string())
        })?;
        assert!(changed);
        let paths = search_paths(&data)?.ok_or("not ELF")?;
        assert_eq!(paths[0].1, "$ORIGIN/../lib:/usr/lib");
        std::fs::write(&exe, &data)?;
        let status = std::process::Command::new(&exe).status()?;
        assert_eq!(status.code(), Some(7));
        // A longer value cannot be written in place.
        let err = rewrite_search_paths(&mut data, &|e| {
            e.starts_with("$ORIGIN").then(|| "x".repeat(200))
        });
        assert!(matches!(err, Err(ElfError::TooLong { .. })));
        Ok(())
    }
}
