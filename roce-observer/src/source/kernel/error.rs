//! What can go wrong with the kernel programs, and how an OS error number turns into advice.
//! Errors are classified by errno, never by message text.

use aya::programs::ProgramError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum KernelError {
    #[error(
        "this binary was built without the kernel programs (AYA_BUILD_SKIP); rebuild with \
         `cargo xtask setup && cargo build --release`, or use `roce-observer analyze` on a capture"
    )]
    NotBuilt,
    #[error(
        "loading BPF programs needs root, or CAP_BPF + CAP_NET_ADMIN + CAP_PERFMON{}: run with \
         sudo or grant {}; on a host where that is impossible, capture instead \
         (`tcpdump -i IFACE -w - udp port 4791 | roce-observer analyze -`)",
        missing_note(.missing),
        grant(.missing)
    )]
    NotPrivileged {
        /// The needed capabilities this process lacks (empty: none, or unknown).
        missing: Vec<&'static str>,
    },
    #[error(
        "this kernel ({release}) lacks {what}; roce-observer needs Linux >= 5.8 with BPF ring \
         buffers and BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF=y); use \
         `roce-observer analyze` on a capture instead"
    )]
    KernelTooOld { release: String, what: &'static str },
    #[error("no interface named `{0}` (list them with `ip link`)")]
    NoSuchInterface(String),
    #[error(
        "another XDP program is already attached to `{iface}` (see `ip link show dev {iface}`); \
         roce-observer never replaces it: detach it yourself, watch another interface, or \
         use a capture (`tcpdump -i {iface} -w - | roce-observer analyze -`)"
    )]
    XdpBusy { iface: String },
    #[error("attaching {what} to `{iface}` failed: {source}")]
    Attach {
        what: &'static str,
        iface: String,
        #[source]
        source: ProgramError,
    },
    #[error(
        "the kernel refused BPF program {program} ({error}); {variant}.\n\
         {explanation}\n\
         Please report this with the output of `uname -a` and `roce-observer --version`; \
         meanwhile `roce-observer analyze` on a capture works on any kernel"
    )]
    Verifier {
        program: &'static str,
        error: std::io::Error,
        /// The kernel release, what was loaded and which fallbacks were taken.
        variant: String,
        /// The verifier log's last lines, or why there is none.
        explanation: String,
    },
    #[error("loading the BPF programs failed: {0}")]
    Load(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("reading BPF map {map} failed: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
}

/// The OS error number somewhere in `err`'s cause chain (syscall, netlink or I/O error).
pub fn errno(err: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(code) = io.raw_os_error()
        {
            return Some(code);
        }
        if let Some(nl) = e.downcast_ref::<aya::sys::NetlinkError>()
            && let Some(code) = nl.raw_os_error()
        {
            return Some(code);
        }
        cur = e.source();
    }
    None
}

/// The kernel refused for lack of privilege (root or CAP_BPF/CAP_NET_ADMIN missing).
pub fn is_privilege(err: &(dyn std::error::Error + 'static)) -> bool {
    matches!(errno(err), Some(libc::EPERM | libc::EACCES))
}

/// Something else is attached already: EBUSY from bpf_link_create on XDP, EEXIST from netlink
/// with "update only if no program is attached".
pub fn is_busy(err: &(dyn std::error::Error + 'static)) -> bool {
    matches!(errno(err), Some(libc::EBUSY | libc::EEXIST))
}

fn missing_note(missing: &[&str]) -> String {
    if missing.is_empty() {
        String::new()
    } else {
        format!(" (this process lacks {})", missing.join(" and "))
    }
}

fn grant(missing: &[&str]) -> String {
    match missing {
        [] => "the three capabilities".to_string(),
        [one] => (*one).to_string(),
        _ => "them".to_string(),
    }
}

/// This process's effective capability set (/proc/self/status `CapEff`), if readable.
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Of the capabilities the programs need, those missing from `eff` (CAP_SYS_ADMIN stands in
/// for CAP_BPF and CAP_PERFMON, as the kernel lets it); none when the set is unknown.
pub fn missing_caps(eff: Option<u64>) -> Vec<&'static str> {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    let Some(eff) = eff else {
        return Vec::new();
    };
    let has = |bit: u32| eff & (1 << bit) != 0;
    let admin = has(CAP_SYS_ADMIN);
    let mut missing = Vec::new();
    if !has(CAP_BPF) && !admin {
        missing.push("CAP_BPF");
    }
    if !has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    if !has(CAP_PERFMON) && !admin {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// The privilege error, naming what this process lacks.
pub fn not_privileged() -> KernelError {
    KernelError::NotPrivileged {
        missing: missing_caps(effective_caps()),
    }
}

/// A load error, told apart by privilege. The verifier also refuses with EACCES: a refusal that
/// comes with a verifier log is a program the kernel rejected, not a missing privilege.
/// Whether this process may use the verifier's trusted mode: CAP_PERFMON (bit 38) or
/// CAP_SYS_ADMIN (bit 21) in its effective set (/proc/self/status `CapEff`). Unknown counts as
/// yes, so a refusal is then reported with the verifier's own log.
fn has_perfmon() -> bool {
    effective_caps().is_none_or(|eff| !missing_caps(Some(eff)).contains(&"CAP_PERFMON"))
}

pub(super) fn load_error<E: std::error::Error + Send + Sync + 'static>(err: E) -> KernelError {
    let verifier_refused = matches!(
        (&err as &dyn std::error::Error).downcast_ref::<aya::programs::ProgramError>(),
        Some(aya::programs::ProgramError::LoadError { verifier_log, .. })
            if !verifier_log.to_string().trim().is_empty()
    );
    // Without CAP_PERFMON (or CAP_SYS_ADMIN) the verifier runs in its unprivileged mode and
    // refuses pointer arithmetic the programs need, with EACCES and a log: that is a missing
    // privilege, not a bug in the program.
    if is_privilege(&err) && (!verifier_refused || !has_perfmon()) {
        not_privileged()
    } else {
        KernelError::Load(Box::new(err))
    }
}

/// A program the kernel refused: the verifier's last meaningful lines and what was probed.
pub(super) fn program_load_error(
    program: &'static str,
    features: &super::Features,
    err: ProgramError,
) -> KernelError {
    // The verifier refuses with EACCES too: with a log and the privilege to use the verifier's
    // trusted mode, that is a program this kernel rejected (as in `load_error`).
    let verifier_refused = matches!(
        &err,
        ProgramError::LoadError { verifier_log, .. }
            if !verifier_log.to_string().trim().is_empty()
    );
    if is_privilege(&err) && (!verifier_refused || !has_perfmon()) {
        return not_privileged();
    }
    let ProgramError::LoadError {
        io_error,
        verifier_log,
    } = err
    else {
        return KernelError::Load(Box::new(err));
    };
    KernelError::Verifier {
        program,
        error: io_error,
        variant: features.describe(),
        explanation: explain(&verifier_log.to_string()),
    }
}

/// How many verifier log lines a user sees: the verdict is at the end, with the instructions
/// that led to it just above.
const LOG_TAIL: usize = 12;

/// The verifier log's last meaningful lines (statistics dropped), with the helper this kernel
/// does not know named first when that is the cause.
fn explain(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim_end)
        .filter(|l| {
            !l.trim().is_empty()
                && !l.starts_with("processed ")
                && !l.starts_with("verification time")
                && !l.starts_with("stack depth")
        })
        .collect();
    if lines.is_empty() {
        return "The verifier printed nothing: the kernel refused the program before verifying \
                it (an attribute or flag it does not know)."
            .into();
    }
    let mut out = String::new();
    if let Some(helper) = lines.iter().find_map(|l| unknown_helper(l)) {
        out.push_str(&format!(
            "This kernel lacks BPF helper {helper}, and the feature probe did not catch it.\n"
        ));
    }
    let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
    out.push_str("Last lines of the verifier log:");
    for l in tail {
        out.push_str("\n  ");
        out.push_str(l);
    }
    out
}

/// `unknown func bpf_x#N` / `invalid func unknown#N`: the helper the kernel does not have.
/// Kernels that do not know a helper cannot name it: the ones this project uses past the 5.8
/// floor are named here.
fn unknown_helper(line: &str) -> Option<String> {
    let helper = ["unknown func ", "invalid func "]
        .iter()
        .find_map(|p| line.split_once(p))
        .map(|(_, rest)| rest.trim())?;
    let named = match helper.rsplit_once('#').map(|(_, id)| id) {
        Some("160") => "bpf_ktime_get_coarse_ns#160 (Linux 5.11+)".to_string(),
        Some("188") => "bpf_xdp_get_buff_len#188 (Linux 5.18+)".to_string(),
        _ => helper.to_string(),
    };
    Some(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syscall(code: i32) -> ProgramError {
        ProgramError::SyscallError(aya::sys::SyscallError {
            call: "bpf_link_create",
            io_error: std::io::Error::from_raw_os_error(code),
        })
    }

    #[test]
    fn classified_by_errno_through_the_cause_chain() {
        assert!(is_busy(&syscall(libc::EBUSY)));
        assert!(is_busy(&syscall(libc::EEXIST)));
        assert!(!is_busy(&syscall(libc::EINVAL)));
        assert!(is_privilege(&syscall(libc::EPERM)));
        assert!(is_privilege(&syscall(libc::EACCES)));
        assert!(!is_privilege(&syscall(libc::EBUSY)));
        assert!(matches!(
            load_error(syscall(libc::EPERM)),
            KernelError::NotPrivileged { .. }
        ));
        assert!(matches!(
            load_error(syscall(libc::E2BIG)),
            KernelError::Load(_)
        ));
        // A message that merely mentions the words is not a privilege error.
        let text = std::io::Error::other("Operation not permitted (text only)");
        assert!(!is_privilege(&text));
    }

    #[test]
    fn the_missing_capability_is_named() {
        let bit = |b: u32| 1u64 << b;
        let all = bit(12) | bit(38) | bit(39);
        assert!(missing_caps(Some(all)).is_empty());
        assert_eq!(missing_caps(Some(bit(12) | bit(39))), ["CAP_PERFMON"]);
        assert_eq!(missing_caps(Some(bit(38) | bit(39))), ["CAP_NET_ADMIN"]);
        assert_eq!(missing_caps(Some(bit(12) | bit(38))), ["CAP_BPF"]);
        // CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON.
        assert_eq!(missing_caps(Some(bit(21))), ["CAP_NET_ADMIN"]);
        assert_eq!(
            missing_caps(Some(0)),
            ["CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"]
        );
        assert!(missing_caps(None).is_empty());
        let one = KernelError::NotPrivileged {
            missing: vec!["CAP_PERFMON"],
        }
        .to_string();
        assert!(
            one.contains("(this process lacks CAP_PERFMON)") && one.contains("grant CAP_PERFMON"),
            "{one}"
        );
        let two = KernelError::NotPrivileged {
            missing: vec!["CAP_BPF", "CAP_PERFMON"],
        }
        .to_string();
        assert!(two.contains("lacks CAP_BPF and CAP_PERFMON"), "{two}");
    }

    #[test]
    fn verifier_logs_are_cut_to_their_verdict() {
        let mut log = String::new();
        for i in 0..40 {
            log.push_str(&format!("{i}: (b7) r0 = {i}\n"));
        }
        // As 5.10 prints it: a kernel without the helper does not know its name either.
        log.push_str("41: (85) call unknown#160\ninvalid func unknown#160\n");
        log.push_str("processed 41 insns (limit 1000000)\n\n");
        let text = explain(&log);
        assert!(
            text.starts_with(
                "This kernel lacks BPF helper bpf_ktime_get_coarse_ns#160 (Linux 5.11+)"
            )
        );
        assert!(text.contains("  invalid func unknown#160"));
        assert!(!text.contains("processed"));
        assert!(!text.contains("  0: (b7)"), "only the last lines: {text}");
        assert_eq!(text.lines().count(), 2 + LOG_TAIL);
        assert!(explain("\n").contains("before verifying"));
        // A helper of a newer kernel than any this project knows keeps the kernel's words.
        assert_eq!(
            unknown_helper("unknown func bpf_future#999"),
            Some("bpf_future#999".into())
        );
    }
}
