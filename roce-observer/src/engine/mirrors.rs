//! Switch-mirror sessions (ERSPAN, VXLAN, ...): the frames each session carried and the gaps
//! in its sequence numbers, bounded as the kernel's `MIRRORS` map is. The capture path's shared
//! observation updates the sessions through [`Mirrors::session`] and [`Mirrors::point`]; the
//! kernel path replaces them with what it read ([`Mirrors::read`]). Its report section is the
//! session list and the summary's `mirror_seq_lost`.

use std::collections::BTreeMap;

use roce_observer_common::{
    Direction,
    mirror::{MAX_MIRROR_SESSIONS, MirrorKey, MirrorStats, SEQ_SEEN},
};

use super::analysis::{Analysis, View};
use crate::report::{MirrorSnapshot, MirrorSource, Snapshot, show_ip};

/// The mirror sessions seen, by session and observation point.
#[derive(Default)]
pub struct Mirrors {
    sessions: BTreeMap<MirrorKey, MirrorStats>,
}

impl Mirrors {
    /// Capture path: the session of `key`, made if absent and the table has room.
    pub fn session(&mut self, key: &MirrorKey) -> Option<&mut MirrorStats> {
        let full = self.sessions.len() >= MAX_MIRROR_SESSIONS as usize;
        match self.sessions.entry(*key) {
            std::collections::btree_map::Entry::Occupied(e) => Some(e.into_mut()),
            std::collections::btree_map::Entry::Vacant(_) if full => None,
            std::collections::btree_map::Entry::Vacant(e) => Some(e.insert(MirrorStats::default())),
        }
    }

    /// Capture path: the observation point a session was first seen at.
    pub fn point(&self, key: &MirrorKey) -> Option<u32> {
        self.sessions.get(key).map(|s| s.point)
    }

    /// Kernel path: the absolute values of one session as read from the kernel's map.
    pub fn read(&mut self, key: &MirrorKey, stats: &MirrorStats) {
        self.sessions.insert(*key, *stats);
    }
}

impl Analysis for Mirrors {
    /// The sessions, by (outer source, encapsulation, ID, outer destination, where seen), and
    /// the sequence numbers they lost in the summary.
    fn section(&mut self, view: &View<'_>, _now: u64, report: &mut Snapshot) {
        let mut out: Vec<MirrorSnapshot> = self
            .sessions
            .iter()
            .filter_map(|(k, m)| {
                Some(MirrorSnapshot {
                    iface: view.names.name(k.ifindex),
                    direction: Direction::from_u8(k.direction).name(),
                    source: MirrorSource::new(k.encap, k.outer_src, k.id)?,
                    outer_dst: show_ip(k.outer_dst),
                    frames: m.frames,
                    sequenced: m.flags & SEQ_SEEN != 0,
                    seq_lost: m.seq_lost,
                    seq_late: m.seq_late,
                    seq_resyncs: m.seq_resyncs,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.source, a.outer_dst, &a.iface, a.direction).cmp(&(
                &b.source,
                b.outer_dst,
                &b.iface,
                b.direction,
            ))
        });
        report.summary.mirror_seq_lost = out.iter().map(|m| m.seq_lost).sum();
        report.mirror = out;
    }
}
