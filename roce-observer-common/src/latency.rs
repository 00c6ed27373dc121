//! Latency matching keys: a timestamped request waits under (interface, requester IP,
//! responder IP, PSN) until the responder answers with the same PSN (docs/metrics.md).

use crate::assert_size;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PendingKey {
    pub requester: [u8; 16],
    pub responder: [u8; 16],
    pub ifindex: u32,
    pub psn: u32,
}
assert_size!(PendingKey, 40);

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
