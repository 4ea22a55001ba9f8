//! `patchwright sandbox exec`: the command people use to rerun an agent's
//! command. The attacks themselves are tested in the sandbox crate.

use std::process::{Command, Output};

fn exec(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(["sandbox", "exec", "--dir"])
        .arg(dir)
        .args(args)
        .output()
        .expect("patchwright runs")
}

#[test]
fn prints_output_and_exits_with_the_commands_status() {
    let dir = tempfile::tempdir().unwrap();
    let o = exec(
        dir.path(),
        &[
            "--",
            "sh",
            "-c",
            "echo hello; echo oops >&2; touch made; exit 3",
        ],
    );
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hello\noops\n");
    assert!(dir.path().join("made").exists(), "the worktree is writable");
}

#[test]
fn a_timeout_exits_124() {
    let dir = tempfile::tempdir().unwrap();
    let o = exec(dir.path(), &["--timeout", "0.5", "--", "sleep", "30"]);
    assert_eq!(o.status.code(), Some(124));
}

#[test]
fn json_reports_status_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let o = exec(
        dir.path(),
        &[
            "--json",
            "--memory",
            "256",
            "--",
            "sh",
            "-c",
            "echo $HOME; exit 2",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["exit_code"], 2);
    assert_eq!(v["timed_out"], false);
    assert_eq!(v["output"], "/tmp\n");
    assert_eq!(v["bytes_omitted"], 0);
    assert_eq!(v["limits"]["memory_bytes"]["value"], 256u64 << 20);
    assert_eq!(v["limits"]["timeout_ms"]["value"], 600_000);
}

#[test]
fn host_secrets_are_out_of_reach() {
    let dir = tempfile::tempdir().unwrap();
    let o = exec(
        dir.path(),
        &["--", "sh", "-c", "ls /root 2>&1; cat /etc/shadow 2>&1"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("ls: cannot access '/root': No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("/etc/shadow: No such file or directory"),
        "{out}"
    );
}

#[test]
fn refusals_exit_125_and_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let missing = std::path::Path::new("/nonexistent/dir");
    let cases: [(&std::path::Path, &[&str], &str); 3] = [
        (missing, &["--", "true"], "/nonexistent/dir"),
        (dir.path(), &["--memory", "0", "--", "true"], "--memory 0"),
        (dir.path(), &["--timeout=-1", "--", "true"], "--timeout -1"),
    ];
    for (d, args, expected) in cases {
        let o = exec(d, args);
        assert_eq!(o.status.code(), Some(125), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(expected), "{err}");
    }
}

#[test]
fn a_relative_ro_bind_is_made_absolute() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .current_dir(dir.path().parent().unwrap())
        .args(["sandbox", "exec", "--dir"])
        .arg(dir.path())
        .args([
            "--ro-bind",
            dir.path().file_name().unwrap().to_str().unwrap(),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// TIOCSTI from inside the sandbox when the runner has a controlling
/// terminal (a pty made by `script`): the sandbox's own session has none, so
/// /dev/tty cannot be opened and stdio are not terminals. The control run,
/// the same helper outside the sandbox under the same pty, shows the
/// terminal was there to attack.
#[test]
fn tiocsti_cannot_reach_the_runners_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("sti.c");
    std::fs::write(
        &src,
        "#include <fcntl.h>\n#include <stdio.h>\n#include <errno.h>\n#include <sys/ioctl.h>\n\
         int main(void){int fd=open(\"/dev/tty\",O_RDWR);\
         if(fd<0){printf(\"tty: errno %d\\n\",errno);return 0;}\
         printf(\"tty: opened\\n\");char c=' ';\
         if(ioctl(fd,TIOCSTI,&c)==0)printf(\"sti: injected\\n\");else printf(\"sti: errno %d\\n\",errno);return 0;}\n",
    )
    .unwrap();
    let exe = dir.path().join("sti");
    let st = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cc is needed for this test");
    assert!(st.success());
    let under_pty = |command: String| {
        let o = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("script (util-linux) is needed for this test");
        String::from_utf8_lossy(&o.stdout).replace('\r', "")
    };
    let control = under_pty(exe.display().to_string());
    assert!(
        control.contains("tty: opened"),
        "the pty gave a controlling terminal: {control}"
    );
    let sandboxed = under_pty(format!(
        "{} sandbox exec --dir {} -- {}",
        env!("CARGO_BIN_EXE_patchwright"),
        dir.path().display(),
        exe.display()
    ));
    assert!(
        sandboxed.contains("tty: errno 6"),
        "ENXIO, no controlling terminal: {sandboxed}"
    );
    assert!(!sandboxed.contains("injected"), "{sandboxed}");
}
