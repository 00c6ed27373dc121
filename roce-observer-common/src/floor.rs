//! The parts the benchmark's hash floor can add, one at a time (`FLOOR_PARTS` in
//! roce-observer-ebpf/src/floor.rs, set by the loader): each is one thing the observer does per
//! packet that the floor does not, so that `cargo xtask bench` shows what it costs by itself,
//! in the same run as the floor and the observer.

/// Read the precise monotonic clock on every packet and keep the reading (the observer reads
/// it once per data packet: activity runs, request timestamps).
pub const CLOCK: u8 = 1;
/// Keep the packets and bytes in a value the size of the observer's flow record
/// (`FlowStats`) instead of 16 bytes: the footprint of the table, with only its first line
/// touched.
pub const RECORD: u8 = 2;
/// Find the key with the observer's parser (`parse::parse_mirrored`: VLAN tags, IPv6, switch
/// mirrors, extended headers, checks) instead of fixed offsets.
pub const PARSER: u8 = 4;
