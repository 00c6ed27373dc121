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
        "loading BPF programs needs root, or CAP_BPF + CAP_NET_ADMIN (+ CAP_PERFMON): run with \
         sudo; on a host where that is impossible, capture instead \
         (`tcpdump -i IFACE -w - udp port 4791 | roce-observer analyze -`)"
    )]
    NotPrivileged,
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

/// A load error, told apart by privilege. The verifier also refuses with EACCES: a refusal that
/// comes with a verifier log is a program the kernel rejected, not a missing privilege.
pub(super) fn load_error<E: std::error::Error + Send + Sync + 'static>(err: E) -> KernelError {
    let verifier_refused = matches!(
        (&err as &dyn std::error::Error).downcast_ref::<aya::programs::ProgramError>(),
        Some(aya::programs::ProgramError::LoadError { verifier_log, .. })
            if !verifier_log.to_string().trim().is_empty()
    );
    if is_privilege(&err) && !verifier_refused {
        KernelError::NotPrivileged
    } else {
        KernelError::Load(Box::new(err))
    }
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
            KernelError::NotPrivileged
        ));
        assert!(matches!(
            load_error(syscall(libc::E2BIG)),
            KernelError::Load(_)
        ));
        // A message that merely mentions the words is not a privilege error.
        let text = std::io::Error::other("Operation not permitted (text only)");
        assert!(!is_privilege(&text));
    }
}
