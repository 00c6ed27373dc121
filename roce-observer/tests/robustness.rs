//! Never a panic: damaged captures (bytes flipped, records cut, garbage spliced in) go through
//! the capture reader and the engine in-process; every run must end with a snapshot whose
//! frame classes still add up.

use std::path::Path;

use roce_observer::{analyze::analyze_reader, engine::EngineConfig};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn damaged_captures_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut runs = 0;
    for name in [
        "rc_send_write_read",
        "truncated",
        "vlan_qinq",
        "ipv6",
        "pfc",
        "fragments",
        "ipv4_options",
    ] {
        let clean = std::fs::read(dir.join(format!("{name}.pcap"))).expect("fixture");
        for round in 0..40 {
            let mut bytes = clean.clone();
            match round % 4 {
                // Flip bytes past the file header (frame contents and record headers).
                0 | 1 => {
                    for _ in 0..1 + rng.below(20) {
                        let i = 24 + rng.below(bytes.len() - 24);
                        bytes[i] ^= (rng.next() as u8) | 1;
                    }
                }
                // Cut anywhere.
                2 => bytes.truncate(rng.below(bytes.len())),
                // Splice garbage in.
                _ => {
                    let at = 24 + rng.below(bytes.len() - 24);
                    let junk: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
                    bytes.splice(at..at, junk);
                }
            }
            let (mut engine, _damage) = analyze_reader(bytes.as_slice(), EngineConfig::default());
            let s = engine.snapshot(engine.last_ts());
            let m = &s.summary;
            assert_eq!(
                m.total_packets,
                m.roce_packets
                    + m.pfc_frames
                    + m.pause_8023x
                    + m.non_roce
                    + m.malformed
                    + m.ip_fragments
                    + m.unsupported,
                "{name} round {round}: classes do not add up"
            );
            let flow_packets: u64 = s.flows.iter().map(|f| f.packets).sum();
            assert_eq!(flow_packets, m.roce_packets, "{name} round {round}");
            runs += 1;
        }
    }
    assert_eq!(runs, 7 * 40);
}
