//! The seccomp filter every sandboxed command runs under: a classic BPF
//! program, written here by hand from [`BLOCKED_SYSCALLS`] (the policy, as
//! data), handed to bubblewrap with `--seccomp FD`. bubblewrap installs it
//! just before it execs the command, so its own setup (mounts, namespaces)
//! is unaffected, and every process the command starts inherits it.
//!
//! The program checks the audit architecture first (a foreign one, e.g. a
//! 32-bit `int 0x80` call or the x32 ABI on x86_64, kills the process: the
//! syscall numbers below mean other calls there), then compares the call
//! number with each blocked call in table order. Calls with
//! [`Rule::ArgMask`] are refused only when their argument has one of the
//! listed bits (clone with a `CLONE_NEW*` flag); [`Rule::ArgEquals`] only
//! for the listed values (ioctl's TIOCSTI). Everything else is allowed.
//!
//! Hand-written rather than a crate (`seccompiler`, `libseccomp`): the
//! program is some eighty instructions of one fixed shape, the table is the
//! only input, no C library or new dependency is needed, and a unit test
//! runs the program through a small BPF interpreter for every row.

use crate::error::SandboxError;

/// `seccomp_data.nr`'s offset: the call number (u32).
const OFFSET_NR: u32 = 0;
/// `seccomp_data.arch`'s offset: the audit architecture (u32).
const OFFSET_ARCH: u32 = 4;
/// `seccomp_data.args[0]`'s offset; each argument is a u64, 8 bytes apart.
/// Both supported architectures are little-endian, so an argument's low 32
/// bits are at its own offset.
const OFFSET_ARGS: u32 = 16;
/// Bytes between two arguments in `seccomp_data.args`.
const ARG_SIZE: u32 = 8;

/// `BPF_LD | BPF_W | BPF_ABS`: load a u32 of `seccomp_data`.
const LD_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`: jump if the accumulator equals k.
const JEQ: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K`: jump if the accumulator is >= k.
const JGE: u16 = 0x35;
/// `BPF_JMP | BPF_JSET | BPF_K`: jump if the accumulator has a bit of k.
const JSET: u16 = 0x45;
/// `BPF_RET | BPF_K`: return k.
const RET: u16 = 0x06;

/// `SECCOMP_RET_ALLOW`: the call proceeds.
pub const RET_ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_ERRNO`: the call fails with the errno in the low 16 bits.
pub const RET_ERRNO: u32 = 0x0005_0000;
/// `SECCOMP_RET_KILL_PROCESS` (Linux 4.14): the whole process is killed
/// with SIGSYS; used for a foreign architecture, where the numbers in the
/// table would mean other calls.
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;

/// The errno a blocked call fails with: "operation not permitted", what
/// the kernel itself answers an unprivileged caller, so programs take their
/// usual fallback (e.g. no sandbox of their own).
pub const BLOCKED_ERRNO: u32 = libc::EPERM as u32;
/// The errno of clone3: "not implemented". Its flags live in memory a BPF
/// program cannot read, so it is refused outright; glibc, seeing ENOSYS,
/// falls back to clone, whose flags are checked (Flatpak and Docker do the
/// same).
pub const CLONE3_ERRNO: u32 = libc::ENOSYS as u32;

/// Every `CLONE_NEW*` flag clone(2) accepts in its flags argument (the low
/// 32 bits): a clone with any of them creates a namespace and is refused.
/// CLONE_NEWTIME (0x80) is left out: in clone's flags those bits are the
/// exit signal; it can only be asked for with unshare or clone3, both
/// refused.
pub const CLONE_NEW_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// `ioctl(fd, TIOCSTI, ...)` pushes characters into a terminal's input: a
/// command could type into the terminal the runner was started from.
pub const TIOCSTI: u32 = 0x5412;
/// `ioctl(fd, TIOCLINUX, ...)`: the Linux console's selection and paste
/// (the same input injection on a virtual console).
pub const TIOCLINUX: u32 = 0x541C;

/// `ADDR_NO_RANDOMIZE`: the personality(2) bit that turns off address
/// space layout randomization for the process and its children.
pub const ADDR_NO_RANDOMIZE: u32 = 0x0040000;
/// personality(2)'s query value (`0xffffffff`): reads the personality
/// without changing it; allowed although it has every bit set.
pub const PERSONALITY_QUERY: u32 = 0xffff_ffff;

/// x86_64's x32 ABI marker in the call number: x32 calls carry
/// `AUDIT_ARCH_X86_64` but other numbers, so any number with this bit is
/// killed like a foreign architecture.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `AUDIT_ARCH_X86_64`: EM_X86_64 (62) | 64-bit | little-endian.
pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// `AUDIT_ARCH_AARCH64`: EM_AARCH64 (183) | 64-bit | little-endian.
pub const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;

/// The audit architecture the filter accepts: the one this program (and so
/// the sandbox's commands) was built for; `None` where the filter has no
/// table ([`seccomp_program`] then refuses).
pub const NATIVE_AUDIT_ARCH: Option<u32> = if cfg!(target_arch = "x86_64") {
    Some(AUDIT_ARCH_X86_64)
} else if cfg!(target_arch = "aarch64") {
    Some(AUDIT_ARCH_AARCH64)
} else {
    None
};

/// kexec_file_load's number (libc lacks it on some aarch64 targets):
/// 320 on x86_64, 294 on aarch64.
const SYS_KEXEC_FILE_LOAD: libc::c_long = if cfg!(target_arch = "x86_64") {
    320
} else {
    294
};

/// How a blocked call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Always, with this errno.
    Always(u32),
    /// When argument `arg` (its low 32 bits) has any bit of `mask`, with
    /// EPERM ([`BLOCKED_ERRNO`]); `except` (if any) is a value that is
    /// allowed even so.
    ArgMask {
        /// Which argument (0-5).
        arg: u32,
        /// The refused bits.
        mask: u32,
        /// A value allowed although it has bits of `mask`.
        except: Option<u32>,
    },
    /// When argument `arg` (its low 32 bits) equals one of `values`, with
    /// EPERM.
    ArgEquals {
        /// Which argument (0-5).
        arg: u32,
        /// The refused values.
        values: &'static [u32],
    },
}

/// One row of the policy: a system call, how it is refused, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// The call's name.
    pub name: &'static str,
    /// Its number on this architecture.
    pub nr: libc::c_long,
    /// When and how it is refused.
    pub rule: Rule,
    /// Why a sandboxed command must not make it.
    pub reason: &'static str,
}

const fn always(name: &'static str, nr: libc::c_long, reason: &'static str) -> Blocked {
    Blocked {
        name,
        nr,
        rule: Rule::Always(BLOCKED_ERRNO),
        reason,
    }
}

const TRACE: &str = "reads or writes another process's memory and registers";
const KEYS: &str = "the kernel keyring is shared beyond the sandbox and a frequent exploit target";
const KERNEL_SURFACE: &str = "a large kernel attack surface no test needs";
const MOUNTS: &str = "changes the mount table (bubblewrap has set it up; it stays as it is)";
const NAMESPACES: &str =
    "creates or joins a namespace (nested user namespaces: the `--disable-userns` block)";
const HOST_ADMIN: &str = "administers the host kernel or machine";

/// The policy: every system call the filter refuses, in the order the
/// program tests them. Anything not listed is allowed.
pub const BLOCKED_SYSCALLS: &[Blocked] = &[
    always("ptrace", libc::SYS_ptrace, TRACE),
    always("process_vm_readv", libc::SYS_process_vm_readv, TRACE),
    always("process_vm_writev", libc::SYS_process_vm_writev, TRACE),
    always("keyctl", libc::SYS_keyctl, KEYS),
    always("add_key", libc::SYS_add_key, KEYS),
    always("request_key", libc::SYS_request_key, KEYS),
    always("bpf", libc::SYS_bpf, KERNEL_SURFACE),
    always("perf_event_open", libc::SYS_perf_event_open, KERNEL_SURFACE),
    always("userfaultfd", libc::SYS_userfaultfd, KERNEL_SURFACE),
    always("mount", libc::SYS_mount, MOUNTS),
    always("umount2", libc::SYS_umount2, MOUNTS),
    always("pivot_root", libc::SYS_pivot_root, MOUNTS),
    always("move_mount", libc::SYS_move_mount, MOUNTS),
    always("open_tree", libc::SYS_open_tree, MOUNTS),
    always("fsopen", libc::SYS_fsopen, MOUNTS),
    always("fsmount", libc::SYS_fsmount, MOUNTS),
    always("fsconfig", libc::SYS_fsconfig, MOUNTS),
    always("fspick", libc::SYS_fspick, MOUNTS),
    always("mount_setattr", libc::SYS_mount_setattr, MOUNTS),
    always("unshare", libc::SYS_unshare, NAMESPACES),
    always("setns", libc::SYS_setns, NAMESPACES),
    Blocked {
        name: "clone",
        nr: libc::SYS_clone,
        rule: Rule::ArgMask {
            arg: 0,
            mask: CLONE_NEW_FLAGS,
            except: None,
        },
        reason: "with a CLONE_NEW* flag it creates a namespace; threads and fork pass",
    },
    Blocked {
        name: "clone3",
        nr: libc::SYS_clone3,
        rule: Rule::Always(CLONE3_ERRNO),
        reason: "its flags are in memory the filter cannot read; ENOSYS makes glibc use clone",
    },
    always("kexec_load", libc::SYS_kexec_load, HOST_ADMIN),
    always(
        "kexec_file_load",
        SYS_KEXEC_FILE_LOAD as libc::c_long,
        HOST_ADMIN,
    ),
    always("init_module", libc::SYS_init_module, HOST_ADMIN),
    always("finit_module", libc::SYS_finit_module, HOST_ADMIN),
    always("delete_module", libc::SYS_delete_module, HOST_ADMIN),
    always("acct", libc::SYS_acct, HOST_ADMIN),
    always("swapon", libc::SYS_swapon, HOST_ADMIN),
    always("swapoff", libc::SYS_swapoff, HOST_ADMIN),
    always("reboot", libc::SYS_reboot, HOST_ADMIN),
    Blocked {
        name: "personality",
        nr: libc::SYS_personality,
        rule: Rule::ArgMask {
            arg: 0,
            mask: ADDR_NO_RANDOMIZE,
            except: Some(PERSONALITY_QUERY),
        },
        reason: "ADDR_NO_RANDOMIZE turns off address randomization (setarch -R)",
    },
    Blocked {
        name: "ioctl",
        nr: libc::SYS_ioctl,
        rule: Rule::ArgEquals {
            arg: 1,
            values: &[TIOCSTI, TIOCLINUX],
        },
        reason: "TIOCSTI and TIOCLINUX inject input into a terminal outside the sandbox",
    },
];

/// The policy in words, one line per blocked call: `name: when -> errno
/// (reason)`. For `patchwright sandbox --describe`-style output and docs.
pub fn describe_seccomp() -> String {
    let errno = |e: u32| match e {
        BLOCKED_ERRNO => "EPERM".to_string(),
        CLONE3_ERRNO => "ENOSYS".to_string(),
        other => format!("errno {other}"),
    };
    let mut s = String::from(
        "seccomp filter: foreign architectures and the x32 ABI are killed; these calls fail:\n",
    );
    for b in BLOCKED_SYSCALLS {
        let when = match b.rule {
            Rule::Always(e) => format!("always -> {}", errno(e)),
            Rule::ArgMask { arg, mask, except } => {
                let ex = except
                    .map(|v| format!(" (except {v:#x})"))
                    .unwrap_or_default();
                format!("arg{arg} & {mask:#x}{ex} -> EPERM")
            }
            Rule::ArgEquals { arg, values } => {
                let vs: Vec<String> = values.iter().map(|v| format!("{v:#x}")).collect();
                format!("arg{arg} in [{}] -> EPERM", vs.join(", "))
            }
        };
        s += &format!("  {}: {when} ({})\n", b.name, b.reason);
    }
    s
}

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Operation.
    pub code: u16,
    /// Jump offset when the test is true.
    pub jt: u8,
    /// Jump offset when it is false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

const fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// Instructions one rule takes after its `JEQ nr` (so the JEQ's false
/// branch can skip them).
fn rule_insns(rule: Rule) -> Vec<Insn> {
    let eperm = RET_ERRNO | BLOCKED_ERRNO;
    match rule {
        Rule::Always(errno) => vec![stmt(RET, RET_ERRNO | errno)],
        Rule::ArgMask { arg, mask, except } => {
            let mut v = vec![stmt(LD_ABS, OFFSET_ARGS + arg * ARG_SIZE)];
            if let Some(value) = except {
                // Equal to the exception: jump over JSET and RET EPERM.
                v.push(jump(JEQ, value, 2, 0));
            }
            v.push(jump(JSET, mask, 0, 1));
            v.push(stmt(RET, eperm));
            v.push(stmt(RET, RET_ALLOW));
            v
        }
        Rule::ArgEquals { arg, values } => {
            let mut v = vec![stmt(LD_ABS, OFFSET_ARGS + arg * ARG_SIZE)];
            let n = values.len();
            for (i, value) in values.iter().enumerate() {
                // A match jumps to RET EPERM, after the remaining tests and
                // RET ALLOW.
                v.push(jump(JEQ, *value, (n - i) as u8, 0));
            }
            v.push(stmt(RET, RET_ALLOW));
            v.push(stmt(RET, eperm));
            v
        }
    }
}

/// The filter for `arch` (an audit architecture) and `table`: pure.
/// Refuses a rule whose instructions do not fit a BPF jump (255).
pub fn build_program(arch: u32, table: &[Blocked]) -> Result<Vec<Insn>, SandboxError> {
    let mut p = vec![
        stmt(LD_ABS, OFFSET_ARCH),
        jump(JEQ, arch, 1, 0),
        stmt(RET, RET_KILL_PROCESS),
        stmt(LD_ABS, OFFSET_NR),
    ];
    if arch == AUDIT_ARCH_X86_64 {
        p.push(jump(JGE, X32_SYSCALL_BIT, 0, 1));
        p.push(stmt(RET, RET_KILL_PROCESS));
    }
    for b in table {
        let body = rule_insns(b.rule);
        let skip = u8::try_from(body.len()).map_err(|_| {
            SandboxError::invalid(format!(
                "the seccomp rule for {} is {} instructions, more than a BPF jump spans",
                b.name,
                body.len()
            ))
        })?;
        let nr = u32::try_from(b.nr).map_err(|_| {
            SandboxError::invalid(format!(
                "the seccomp table's number for {} is invalid",
                b.name
            ))
        })?;
        p.push(jump(JEQ, nr, 0, skip));
        p.extend(body);
    }
    p.push(stmt(RET, RET_ALLOW));
    Ok(p)
}

/// The program as bubblewrap reads it from `--seccomp FD`: the
/// `struct sock_filter` array in native byte order, 8 bytes each.
pub fn program_bytes(program: &[Insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for i in program {
        out.extend_from_slice(&i.code.to_ne_bytes());
        out.push(i.jt);
        out.push(i.jf);
        out.extend_from_slice(&i.k.to_ne_bytes());
    }
    out
}

/// The sandbox's filter for this architecture ([`BLOCKED_SYSCALLS`]), as
/// bytes for bubblewrap; an error on an architecture without a table.
pub fn seccomp_program() -> Result<Vec<u8>, SandboxError> {
    let arch = NATIVE_AUDIT_ARCH.ok_or_else(|| {
        SandboxError::invalid(
            "the seccomp filter has syscall tables for x86_64 and aarch64 only; this build's \
             architecture has none, and the sandbox does not run without it",
        )
    })?;
    Ok(program_bytes(&build_program(arch, BLOCKED_SYSCALLS)?))
}

/// Runs `program` on one `seccomp_data` (call number, architecture,
/// arguments) the way the kernel does, for tests: the value returned, or
/// `None` for a malformed program (a jump or load out of range).
pub fn evaluate(program: &[Insn], nr: u32, arch: u32, args: [u64; 6]) -> Option<u32> {
    let mut data = Vec::with_capacity(64);
    data.extend_from_slice(&nr.to_le_bytes());
    data.extend_from_slice(&arch.to_le_bytes());
    data.extend_from_slice(&0u64.to_le_bytes());
    for a in args {
        data.extend_from_slice(&a.to_le_bytes());
    }
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    loop {
        let i = program.get(pc)?;
        let next = pc + 1;
        let branch = |t: bool| next + if t { i.jt as usize } else { i.jf as usize };
        pc = match i.code {
            LD_ABS => {
                let o = i.k as usize;
                let b = data.get(o..o + 4)?;
                acc = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                next
            }
            JEQ => branch(acc == i.k),
            JGE => branch(acc >= i.k),
            JSET => branch(acc & i.k != 0),
            RET => return Some(i.k),
            _ => return None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nr(name: &str) -> u32 {
        BLOCKED_SYSCALLS
            .iter()
            .find(|b| b.name == name)
            .map(|b| b.nr as u32)
            .unwrap()
    }

    const EPERM: u32 = RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = RET_ERRNO | libc::ENOSYS as u32;

    #[test]
    fn every_row_and_the_ordinary_calls_get_the_right_answer() {
        let arch = NATIVE_AUDIT_ARCH.unwrap();
        let p = build_program(arch, BLOCKED_SYSCALLS).unwrap();
        let a = |a0: u64, a1: u64| [a0, a1, 0, 0, 0, 0];
        let sigchld = libc::SIGCHLD as u64;
        let thread_flags = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM) as u64;
        let cases: Vec<(&str, u32, [u64; 6], u32)> = vec![
            ("ptrace", nr("ptrace"), a(0, 0), EPERM),
            ("keyctl", nr("keyctl"), a(0, 0), EPERM),
            ("bpf", nr("bpf"), a(0, 0), EPERM),
            ("unshare", nr("unshare"), a(0, 0), EPERM),
            ("clone3", nr("clone3"), a(0, 0), ENOSYS),
            ("reboot", nr("reboot"), a(0, 0), EPERM),
            ("fork via clone", nr("clone"), a(sigchld, 0), RET_ALLOW),
            (
                "thread via clone",
                nr("clone"),
                a(thread_flags, 0),
                RET_ALLOW,
            ),
            (
                "clone NEWUSER",
                nr("clone"),
                a(libc::CLONE_NEWUSER as u64 | sigchld, 0),
                EPERM,
            ),
            (
                "clone NEWNS",
                nr("clone"),
                a(libc::CLONE_NEWNS as u64, 0),
                EPERM,
            ),
            (
                "clone NEWNET",
                nr("clone"),
                a(libc::CLONE_NEWNET as u64, 0),
                EPERM,
            ),
            ("ioctl TIOCSTI", nr("ioctl"), a(0, TIOCSTI as u64), EPERM),
            (
                "ioctl TIOCLINUX",
                nr("ioctl"),
                a(0, TIOCLINUX as u64),
                EPERM,
            ),
            // The kernel reads cmd as unsigned int: high bits do not hide it.
            (
                "ioctl TIOCSTI high bits",
                nr("ioctl"),
                a(0, (1 << 32) | TIOCSTI as u64),
                EPERM,
            ),
            ("ioctl TCGETS", nr("ioctl"), a(0, 0x5401), RET_ALLOW),
            (
                "personality query",
                nr("personality"),
                a(0xffff_ffff, 0),
                RET_ALLOW,
            ),
            (
                "personality PER_LINUX",
                nr("personality"),
                a(0, 0),
                RET_ALLOW,
            ),
            (
                "personality ADDR_NO_RANDOMIZE",
                nr("personality"),
                a(ADDR_NO_RANDOMIZE as u64, 0),
                EPERM,
            ),
            ("read", libc::SYS_read as u32, a(0, 0), RET_ALLOW),
            ("execve", libc::SYS_execve as u32, a(0, 0), RET_ALLOW),
            ("wait4", libc::SYS_wait4 as u32, a(0, 0), RET_ALLOW),
        ];
        for (what, n, args, want) in cases {
            assert_eq!(evaluate(&p, n, arch, args), Some(want), "{what}");
        }
        // Every row of the table is refused with its own errno when its
        // condition holds.
        for b in BLOCKED_SYSCALLS {
            let args = match b.rule {
                Rule::Always(_) => [0; 6],
                Rule::ArgMask { arg, mask, .. } => {
                    let mut v = [0; 6];
                    v[arg as usize] = mask as u64;
                    v
                }
                Rule::ArgEquals { arg, values } => {
                    let mut v = [0; 6];
                    v[arg as usize] = values[0] as u64;
                    v
                }
            };
            let want = match b.rule {
                Rule::Always(e) => RET_ERRNO | e,
                _ => EPERM,
            };
            assert_eq!(
                evaluate(&p, b.nr as u32, arch, args),
                Some(want),
                "{}",
                b.name
            );
        }
    }

    #[test]
    fn a_foreign_architecture_and_x32_are_killed() {
        let p = build_program(AUDIT_ARCH_X86_64, BLOCKED_SYSCALLS).unwrap();
        let cases: &[(u32, u32, u32)] = &[
            // i386 (AUDIT_ARCH_I386) read: killed, whatever the number.
            (3, 0x4000_0003, RET_KILL_PROCESS),
            (0, AUDIT_ARCH_AARCH64, RET_KILL_PROCESS),
            // x32 read (0x40000000 | 0).
            (X32_SYSCALL_BIT, AUDIT_ARCH_X86_64, RET_KILL_PROCESS),
            (0, AUDIT_ARCH_X86_64, RET_ALLOW),
        ];
        for &(n, arch, want) in cases {
            assert_eq!(
                evaluate(&p, n, arch, [0; 6]),
                Some(want),
                "{n:#x} {arch:#x}"
            );
        }
        let arm = build_program(AUDIT_ARCH_AARCH64, BLOCKED_SYSCALLS).unwrap();
        assert_eq!(
            evaluate(&arm, 0, AUDIT_ARCH_X86_64, [0; 6]),
            Some(RET_KILL_PROCESS)
        );
        // No x32 check on aarch64: the first five instructions are the
        // arch check and the number load, then the table.
        assert_eq!(arm.len() + 2, p.len());
    }

    #[test]
    fn the_program_serializes_to_sock_filter_bytes() {
        let bytes = program_bytes(&[jump(JEQ, 0x0102_0304, 1, 2), stmt(RET, RET_ALLOW)]);
        let mut want = Vec::new();
        want.extend_from_slice(&JEQ.to_ne_bytes());
        want.extend_from_slice(&[1, 2]);
        want.extend_from_slice(&0x0102_0304u32.to_ne_bytes());
        want.extend_from_slice(&RET.to_ne_bytes());
        want.extend_from_slice(&[0, 0]);
        want.extend_from_slice(&RET_ALLOW.to_ne_bytes());
        assert_eq!(bytes, want);
        let full = seccomp_program().unwrap();
        let insns = build_program(NATIVE_AUDIT_ARCH.unwrap(), BLOCKED_SYSCALLS).unwrap();
        assert_eq!(full.len(), insns.len() * 8);
        // BPF_MAXINSNS is 4096; the kernel refuses longer programs.
        assert!(insns.len() < 4096, "{}", insns.len());
    }

    #[test]
    fn the_description_lists_every_row() {
        let d = describe_seccomp();
        assert_eq!(d.lines().count(), BLOCKED_SYSCALLS.len() + 1);
        assert!(d.contains("  clone3: always -> ENOSYS (its flags"), "{d}");
        assert!(
            d.contains("  ioctl: arg1 in [0x5412, 0x541c] -> EPERM"),
            "{d}"
        );
        assert!(d.contains("  clone: arg0 & 0x7e020000 -> EPERM"), "{d}");
    }
}
