//! Latency matching keys: a timestamped request waits under (interface, requester IP,
//! responder IP, PSN, mirror source) until the responder answers with the same PSN
//! (docs/metrics.md). The mirror source keeps two switches' copies of one request apart.

use crate::{FlowKey, assert_size};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PendingKey {
    pub requester: [u8; 16],
    pub responder: [u8; 16],
    pub ifindex: u32,
    pub psn: u32,
    /// The flow key's mirror source (`FlowKey::outer_src`, `mirror_id`, `encap`).
    pub outer_src: [u8; 16],
    pub mirror_id: u32,
    pub encap: u8,
    pub _pad: [u8; 3],
}
assert_size!(PendingKey, 64);

impl PendingKey {
    pub const fn zeroed() -> PendingKey {
        PendingKey {
            requester: [0; 16],
            responder: [0; 16],
            ifindex: 0,
            psn: 0,
            outer_src: [0; 16],
            mirror_id: 0,
            encap: 0,
            _pad: [0; 3],
        }
    }

    /// The key of a request from `requester` to `responder` with `psn`, seen where `flow`
    /// was (interface and mirror source).
    #[inline(always)]
    pub fn fill(&mut self, flow: &FlowKey, requester: [u8; 16], responder: [u8; 16], psn: u32) {
        self.requester = requester;
        self.responder = responder;
        self.ifindex = flow.ifindex;
        self.psn = psn;
        self.outer_src = flow.outer_src;
        self.mirror_id = flow.mirror_id;
        self.encap = flow.encap;
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingValue {
    pub ts_ns: u64,
    /// The request's destination QP (the responder's QP).
    pub dst_qp: u32,
    /// Direction the request was seen in.
    pub direction: u8,
    pub _pad: [u8; 3],
}
assert_size!(PendingValue, 16);
