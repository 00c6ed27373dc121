//! Attaching the programs to an interface, and detaching exactly what was attached.
//!
//! Never replaces or detaches anything it did not attach: XDP attaches with bpf_link (or, on
//! kernels without XDP links, netlink with "update if no existing program"), TC through TCX
//! links (kernel >= 6.6) or a new netlink filter next to existing ones.

use aya::{
    Ebpf,
    programs::{
        SchedClassifier, TcAttachType, Xdp, XdpMode,
        links::Link as _,
        tc::{self, SchedClassifierLink},
        xdp::XdpLink,
    },
    util::KernelVersion,
};

use super::{
    TC_PROGRAM,
    error::{KernelError, is_busy},
    program_mut,
};

/// One interface we attached to. Owns its links: dropping it detaches them too, but only
/// [`Attachment::detach`] also removes a clsact qdisc we created and reports what failed.
#[derive(Debug)]
pub struct Attachment {
    pub iface: String,
    pub ifindex: u32,
    xdp: Option<XdpLink>,
    tc: Option<SchedClassifierLink>,
    /// We added the clsact qdisc (netlink TC path): delete it when detaching.
    created_clsact: bool,
}

impl Attachment {
    /// Attach XDP (ingress) and TC egress to `iface`. Warnings (a fallback taken) go to
    /// `warnings`. On error nothing of ours stays attached.
    pub(super) fn attach(
        ebpf: &mut Ebpf,
        xdp_program: &'static str,
        iface: &str,
        xdp_mode: XdpMode,
        warnings: &mut Vec<String>,
    ) -> Result<Attachment, KernelError> {
        let ifindex = ifindex(iface).ok_or_else(|| KernelError::NoSuchInterface(iface.into()))?;
        let mut attachment = Attachment {
            iface: iface.to_string(),
            ifindex,
            xdp: None,
            tc: None,
            created_clsact: false,
        };
        let xdp = program_mut::<Xdp>(ebpf, xdp_program)?;
        let mut result = xdp.attach(iface, xdp_mode);
        // `auto`: a driver may refuse native XDP for its configuration (virtio_net with a
        // jumbo MTU, say); generic XDP sees the same frames, only slower.
        if matches!(xdp_mode, XdpMode::Default)
            && let Err(err) = &result
            && !is_busy(err)
        {
            warnings.push(format!(
                "native XDP on `{iface}` refused ({err}); using generic (skb) XDP"
            ));
            result = xdp.attach(iface, XdpMode::Skb);
        }
        let id = result.map_err(|source| {
            if is_busy(&source) {
                KernelError::XdpBusy {
                    iface: iface.into(),
                }
            } else {
                KernelError::Attach {
                    what: "XDP",
                    iface: iface.into(),
                    source,
                }
            }
        })?;
        attachment.xdp = Some(xdp.take_link(id).map_err(|source| KernelError::Attach {
            what: "XDP",
            iface: iface.into(),
            source,
        })?);
        // Kernels with TCX (>= 6.6) attach TC programs as links: nothing else to create. Older
        // ones need a clsact qdisc for the netlink filter; one we create is removed on detach.
        let tcx = KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
        if !tcx && tc::qdisc_add_clsact(iface).is_ok() {
            attachment.created_clsact = true;
        }
        let tc_prog = program_mut::<SchedClassifier>(ebpf, TC_PROGRAM)?;
        let tc_link = tc_prog
            .attach(iface, TcAttachType::Egress)
            .and_then(|id| tc_prog.take_link(id));
        match tc_link {
            Ok(link) => attachment.tc = Some(link),
            Err(source) => {
                // Undo the XDP half so nothing of ours stays behind.
                warnings.extend(attachment.detach());
                return Err(KernelError::Attach {
                    what: "TC egress",
                    iface: iface.into(),
                    source,
                });
            }
        }
        Ok(attachment)
    }

    /// Detach both programs and remove a clsact qdisc we created. Returns what could not be
    /// undone, as advice for the user.
    pub fn detach(mut self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(link) = self.xdp.take()
            && let Err(err) = link.detach()
        {
            warnings.push(format!("detaching XDP from `{}` failed: {err}", self.iface));
        }
        if let Some(link) = self.tc.take()
            && let Err(err) = link.detach()
        {
            warnings.push(format!(
                "detaching TC egress from `{}` failed: {err}",
                self.iface
            ));
        }
        if std::mem::take(&mut self.created_clsact) && !remove_clsact(&self.iface) {
            warnings.push(format!(
                "could not remove the clsact qdisc it added on `{iface}`; remove it with \
                 `tc qdisc del dev {iface} clsact`",
                iface = self.iface
            ));
        }
        warnings
    }
}

/// Delete the clsact qdisc we added (aya has no call for it; iproute2's `tc` does it).
fn remove_clsact(iface: &str) -> bool {
    std::process::Command::new("tc")
        .args(["qdisc", "del", "dev", iface, "clsact"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The index of the interface named `iface`, if there is one.
pub fn ifindex(iface: &str) -> Option<u32> {
    let name = std::ffi::CString::new(iface).ok()?;
    // SAFETY: `name` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (idx != 0).then_some(idx)
}
