//! Global counters: one per-CPU array slot per (direction, counter), summed in user space.
//! Frame classes partition `TotalPackets` exactly (see docs/metrics.md); the rest are kernel
//! error counters (map full, ring buffer full) that explain missing events or flows.
//! Each frame is counted once, in its class: `TotalPackets` is their sum, filled in by the
//! reader ([`Counter::fill_total`]), not counted per packet.

/// Index into the per-direction counter block. `#[repr(u32)]` because the kernel uses it as a
/// map index.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    TotalPackets = 0,
    RocePackets = 1,
    PfcFrames = 2,
    Pause8023x = 3,
    NonRoce = 4,
    Malformed = 5,
    IpFragments = 6,
    Unsupported = 7,
    /// A new flow or PFC entry could not be inserted: its packets are in the frame classes but
    /// in no flow.
    MapFull = 8,
    /// An event could not be reserved in the ring buffer (counters stay exact; the event is lost).
    RingbufFull = 9,
    /// A timestamped request was pushed out of the table of waiting requests before its answer
    /// (latency.rs, `PendingSet::insert`; one that waited 1 s or more is not counted).
    PendingFull = 10,
    /// A packet that needed the PSN scoreboard could not be handed to the kernel's scoreboard
    /// program (observe.rs, `Tables::SCOREBOARD`): counted in its class, in no flow.
    TailCallFailed = 11,
}

impl Counter {
    /// Number of counters per direction.
    pub const COUNT: u32 = 12;
    /// All counters, in index order.
    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::TotalPackets,
        Counter::RocePackets,
        Counter::PfcFrames,
        Counter::Pause8023x,
        Counter::NonRoce,
        Counter::Malformed,
        Counter::IpFragments,
        Counter::Unsupported,
        Counter::MapFull,
        Counter::RingbufFull,
        Counter::PendingFull,
        Counter::TailCallFailed,
    ];

    /// Name used in JSON output and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::TotalPackets => "total_packets",
            Counter::RocePackets => "roce_packets",
            Counter::PfcFrames => "pfc_frames",
            Counter::Pause8023x => "pause_8023x",
            Counter::NonRoce => "non_roce",
            Counter::Malformed => "malformed",
            Counter::IpFragments => "ip_fragments",
            Counter::Unsupported => "unsupported",
            Counter::MapFull => "map_full",
            Counter::RingbufFull => "ringbuf_full",
            Counter::PendingFull => "pending_full",
            Counter::TailCallFailed => "tail_call_failed",
        }
    }

    /// A frame class: every frame is counted in exactly one of these.
    pub const fn is_frame_class(self) -> bool {
        matches!(
            self,
            Counter::RocePackets
                | Counter::PfcFrames
                | Counter::Pause8023x
                | Counter::NonRoce
                | Counter::Malformed
                | Counter::IpFragments
                | Counter::Unsupported
        )
    }

    /// Set `block[TotalPackets]` to the sum of the frame classes of `block`.
    pub fn fill_total(block: &mut [u64; Self::COUNT as usize]) {
        block[Counter::TotalPackets as usize] = Counter::ALL
            .iter()
            .filter(|c| c.is_frame_class())
            .map(|c| block[*c as usize])
            .sum();
    }

    /// Slot in the kernel's counter array for this counter seen in `direction`.
    #[inline(always)]
    pub const fn slot(self, direction: u8) -> u32 {
        (direction as u32 & 1) * Self::COUNT + self as u32
    }
}

/// Size of the kernel counter array: one block per direction (ingress, egress).
pub const COUNTER_SLOTS: u32 = 2 * Counter::COUNT;
