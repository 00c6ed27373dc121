//! Reading the kernel programs' maps and ring buffer, with kernel timestamps turned into ns
//! since the Unix epoch.

use std::os::fd::AsFd as _;

use aya::maps::{HashMap, MapData, MapError, PerCpuArray};
use roce_observer_common::{
    Counter, Event, FlowKey, FlowStats, PfcKey, PfcStats,
    counters::COUNTER_SLOTS,
    latency::LatencyHist,
    lossless::{EctCache, LOAD_INTERVAL_NS, LosslessKey, LosslessState},
    mirror::{MirrorKey, MirrorStats},
    pfc::{PfcLink, PfcLinkKey},
    run::{DataRun, RunBatch},
};

use super::{FlowBuffers, KernelSource, error::KernelError};

/// The kernel times of flow entry `v` plus `offset` (ns since the epoch).
fn flow_to_epoch(offset: u64, v: &mut FlowStats) {
    let epoch = |ns: u64| ns.saturating_add(offset);
    v.first_ns = epoch(v.first_ns);
    v.last_ns = epoch(v.last_ns);
    for w in [&mut v.retransmit_bursts, &mut v.nak_bursts] {
        if w.bursts > 0 {
            w.first_burst_ns = epoch(w.first_burst_ns);
            w.last_burst_ns = epoch(w.last_burst_ns);
        }
        w.start_ns = epoch(w.start_ns);
    }
    // The open activity runs (training steps), when there is one.
    if v.run.packets > 0 {
        v.run.start_ns = epoch(v.run.start_ns);
        v.run.end_ns = epoch(v.run.end_ns);
    }
    if (v.signals.cnp | v.signals.naks) != 0 {
        v.signals.start_ns = epoch(v.signals.start_ns);
        v.signals.end_ns = epoch(v.signals.end_ns);
    }
}

fn map<'a>(src: &'a KernelSource, name: &'static str) -> Result<&'a aya::maps::Map, KernelError> {
    ebpf_map(&src.ebpf, name)
}

pub(super) fn ebpf_map<'a>(
    ebpf: &'a aya::Ebpf,
    name: &'static str,
) -> Result<&'a aya::maps::Map, KernelError> {
    ebpf.map(name).ok_or(KernelError::Map {
        map: name,
        source: MapError::InvalidName { name: name.into() },
    })
}

/// Every entry of the hash map `name` (keys `K`, values `V`: a flow or latency map), one chunk
/// at a time through `keys` and `values` (see `read_flow_table`), handed to `each`.
fn read_map<K: aya::Pod, V: aya::Pod>(
    map: &aya::maps::Map,
    name: &'static str,
    keys: &mut Vec<K>,
    values: &mut Vec<V>,
    mut each: impl FnMut(&K, &mut V),
) -> Result<(), KernelError> {
    if let aya::maps::Map::HashMap(data) = map {
        let mut handed = false;
        let batched = super::batch::lookup_all_chunks(data.fd().as_fd(), keys, values, |ks, vs| {
            handed = true;
            for (k, v) in ks.iter().zip(vs.iter_mut()) {
                each(k, v);
            }
        });
        match batched {
            Ok(()) => return Ok(()),
            // Entries were handed over: a per-key read would hand them again.
            Err(io_error) if handed => {
                return Err(KernelError::Map {
                    map: name,
                    source: MapError::SyscallError(aya::sys::SyscallError {
                        call: "bpf_map_lookup_batch",
                        io_error,
                    }),
                });
            }
            // The kernel has no batch lookups for this map: per key below.
            Err(_) => {}
        }
    }
    let flows = HashMap::<&MapData, K, V>::try_from(map).map_err(map_error(name))?;
    // An entry deleted between key iteration and lookup is skipped (flatten).
    for (k, mut v) in flows.iter().flatten() {
        each(&k, &mut v);
    }
    Ok(())
}

/// Every mirror session as the kernel keeps it: its key (`MIRRORS`, key -> slot) and its
/// counters (`SESSIONS[slot]`, with the session's number in `point`).
fn mirror_table(ebpf: &aya::Ebpf) -> Result<Vec<(MirrorKey, MirrorStats)>, KernelError> {
    let mirrors = HashMap::<&MapData, MirrorKey, u32>::try_from(ebpf_map(ebpf, "MIRRORS")?)
        .map_err(map_error("MIRRORS"))?;
    let sessions = aya::maps::Array::<&MapData, MirrorStats>::try_from(ebpf_map(ebpf, "SESSIONS")?)
        .map_err(map_error("SESSIONS"))?;
    let mut out = Vec::new();
    for (key, slot) in mirrors.iter().flatten() {
        out.push((key, sessions.get(&slot, 0).map_err(map_error("SESSIONS"))?));
    }
    Ok(out)
}

pub(super) fn map_error(map: &'static str) -> impl Fn(MapError) -> KernelError {
    move |source| KernelError::Map { map, source }
}

/// The mirror sessions by number (`MirrorStats::point`), read from the maps at the first
/// mirrored flow a read meets; a failed read is returned once the flows are done
/// ([`Sessions::result`]).
pub(super) struct Sessions<'a> {
    ebpf: &'a aya::Ebpf,
    read: Option<Result<std::collections::HashMap<u32, MirrorKey>, KernelError>>,
}

impl<'a> Sessions<'a> {
    pub(super) fn new(ebpf: &'a aya::Ebpf) -> Sessions<'a> {
        Sessions { ebpf, read: None }
    }

    /// The session numbered `point`.
    pub(super) fn get(&mut self, point: u32) -> Option<MirrorKey> {
        let ebpf = self.ebpf;
        let read = self.read.get_or_insert_with(|| {
            mirror_table(ebpf).map(|m| m.into_iter().map(|(k, v)| (v.point, k)).collect())
        });
        read.as_ref().ok()?.get(&point).copied()
    }

    /// The error of the sessions' read, if it failed.
    pub(super) fn result(self) -> Result<(), KernelError> {
        match self.read {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }
}

impl KernelSource {
    /// Kernel monotonic ns -> ns since the Unix epoch.
    pub fn to_epoch_ns(&self, monotonic_ns: u64) -> u64 {
        monotonic_ns.saturating_add(self.epoch_offset_ns)
    }

    /// Every flow entry, with times turned into ns since the epoch.
    pub fn read_flows(&mut self) -> Result<Vec<(FlowKey, FlowStats)>, KernelError> {
        let mut out = Vec::new();
        self.read_flow_table(|k, v| out.push((*k, *v)))?;
        Ok(out)
    }

    /// Every flow entry, in the kernel's hash order (`FLOWS4`, then `FLOWS6`), handed to `each`
    /// with its compact key expanded into the [`FlowKey`] (the mirror source from the session's
    /// number, `MIRRORS` read once when a mirrored flow is met) and times converted.
    /// Read through chunk buffers the source keeps: a table of 100,000 flows is 50 MB, and
    /// allocating and faulting that in afresh every report tick cost more than the read itself,
    /// and keeping all of it between ticks cost 570 bytes per flow. One batched
    /// lookup per 4096 entries where the kernel has them (5.6), else two syscalls per entry.
    /// A flow of a session made after `MIRRORS` was read is left to the next read.
    pub(super) fn read_flow_table(
        &mut self,
        mut each: impl FnMut(&FlowKey, &FlowStats),
    ) -> Result<(), KernelError> {
        let offset = self.epoch_offset_ns;
        let ebpf = &self.ebpf;
        let mut sessions = Sessions::new(ebpf);
        let mut session = |point: u32| sessions.get(point);
        let FlowBuffers {
            keys4,
            keys6,
            values,
            ..
        } = &mut self.flow_buffers;
        // Both maps' entries, expanded to the same FlowKey (None: a mirror session not read).
        let mut take = |key: Option<FlowKey>, v: &mut FlowStats| {
            if let Some(key) = key {
                flow_to_epoch(offset, v);
                each(&key, v);
            }
        };
        read_map(
            ebpf_map(ebpf, "FLOWS4")?,
            "FLOWS4",
            keys4,
            values,
            |k, v| take(k.expand(&mut session), v),
        )?;
        read_map(
            ebpf_map(ebpf, "FLOWS6")?,
            "FLOWS6",
            keys6,
            values,
            |k, v| take(k.expand(&mut session), v),
        )?;
        sessions.result()
    }

    /// A flow entry's kernel times turned into ns since the epoch.
    pub(super) fn flow_to_epoch(&self, v: &mut FlowStats) {
        flow_to_epoch(self.epoch_offset_ns, v);
    }

    /// Every request flow's latency histogram (`LATENCY4`, then `LATENCY6`), handed to `each`
    /// with its key expanded as the flow table's and its alert times converted; through chunk
    /// buffers kept like the flow table's.
    pub(super) fn read_latency(
        &mut self,
        mut each: impl FnMut(&FlowKey, &LatencyHist),
    ) -> Result<(), KernelError> {
        let offset = self.epoch_offset_ns;
        let ebpf = &self.ebpf;
        // A failed read of the sessions leaves their flows' histograms to the next read.
        let mut sessions = Sessions::new(ebpf);
        let mut session = |point: u32| sessions.get(point);
        let FlowBuffers {
            keys4,
            keys6,
            latency,
            ..
        } = &mut self.flow_buffers;
        let mut take = |key: Option<FlowKey>, h: &mut LatencyHist| {
            if let Some(key) = key {
                if h.over > 0 {
                    h.over_first_ts = h.over_first_ts.saturating_add(offset);
                    h.over_last_ts = h.over_last_ts.saturating_add(offset);
                }
                each(&key, h);
            }
        };
        read_map(
            ebpf_map(ebpf, "LATENCY4")?,
            "LATENCY4",
            keys4,
            latency,
            |k, h| take(k.expand(&mut session), h),
        )?;
        read_map(
            ebpf_map(ebpf, "LATENCY6")?,
            "LATENCY6",
            keys6,
            latency,
            |k, h| take(k.expand(&mut session), h),
        )
    }

    /// Every flow's batch of finished data runs, with times turned into ns since the epoch.
    pub fn read_batches(&mut self) -> Result<Vec<(FlowKey, RunBatch)>, KernelError> {
        let mut out = Vec::new();
        self.read_run_batches(|k, b| out.push((*k, *b)))?;
        Ok(out)
    }

    /// Every flow's batch of finished data runs (`RUN_BATCHES`, keyed by the whole flow key),
    /// handed to `each` with the times of its runs converted; through chunk buffers kept like
    /// the flow table's.
    pub(super) fn read_run_batches(
        &mut self,
        mut each: impl FnMut(&FlowKey, &RunBatch),
    ) -> Result<(), KernelError> {
        let offset = self.epoch_offset_ns;
        let FlowBuffers {
            batch_keys,
            batches,
            ..
        } = &mut self.flow_buffers;
        read_map(
            ebpf_map(&self.ebpf, "RUN_BATCHES")?,
            "RUN_BATCHES",
            batch_keys,
            batches,
            |k, b| {
                // Every slot written so far.
                for r in b.runs.iter_mut().filter(|r| r.packets > 0) {
                    r.start_ns = r.start_ns.saturating_add(offset);
                    r.end_ns = r.end_ns.saturating_add(offset);
                }
                each(k, b);
            },
        )
    }

    /// One entry per (interface, direction, source MAC, priority) that saw a frame: the
    /// kernel keeps all priorities of a link in one entry (`PfcLink`).
    pub fn read_pfc(&self) -> Result<Vec<(PfcKey, PfcStats)>, KernelError> {
        let pfc = HashMap::<&MapData, PfcLinkKey, PfcLink>::try_from(map(self, "PFC")?)
            .map_err(map_error("PFC"))?;
        let mut out = Vec::new();
        for (link, entry) in pfc.iter().flatten() {
            for (slot, mut v) in entry.slots.into_iter().enumerate() {
                if v.pause_frames + v.xon_frames == 0 {
                    continue;
                }
                v.first_ns = self.to_epoch_ns(v.first_ns);
                v.last_ns = self.to_epoch_ns(v.last_ns);
                out.push((link.priority_key(slot), v));
            }
        }
        Ok(out)
    }

    /// Every lossless-class entry (one per interface and priority that had a congestion
    /// signal or ECT data), with its times since the epoch (0 stays none) and `load_slot` the
    /// interval index since the epoch + 1 (the programs align intervals to the epoch, so the
    /// monotonic index is off by a whole number of intervals).
    pub fn read_lossless(&self) -> Result<Vec<(LosslessKey, LosslessState)>, KernelError> {
        let lossless =
            HashMap::<&MapData, LosslessKey, LosslessState>::try_from(map(self, "LOSSLESS")?)
                .map_err(map_error("LOSSLESS"))?;
        let offset = self.epoch_offset_ns;
        let epoch = |t: &mut u64| {
            if *t != 0 {
                *t = t.saturating_add(offset);
            }
        };
        let mut out: Vec<(LosslessKey, LosslessState)> = Vec::new();
        for (key, mut st) in lossless.iter().flatten() {
            for t in [
                &mut st.ep_start,
                &mut st.ep_last,
                &mut st.ep_first_mark,
                &mut st.ep_first_xoff,
            ] {
                epoch(t);
            }
            if st.load_slot != 0 {
                st.load_slot += offset / LOAD_INTERVAL_NS;
            }
            out.push((key, st));
        }
        // Each CPU's ECT data not yet in its entry (read after the entries: one moved in
        // between is missing from this read, not counted twice).
        let caches = PerCpuArray::<&MapData, EctCache>::try_from(map(self, "LOSSLESS_ECT")?)
            .map_err(map_error("LOSSLESS_ECT"))?;
        let per_cpu = caches.get(&0, 0).map_err(map_error("LOSSLESS_ECT"))?;
        for cache in per_cpu.iter().filter(|c| c.pending != 0) {
            match out.iter_mut().find(|(k, _)| *k == cache.key) {
                Some((_, st)) => st.ect_data += cache.pending,
                None => out.push((
                    cache.key,
                    LosslessState {
                        ect_data: cache.pending,
                        ..LosslessState::zeroed()
                    },
                )),
            }
        }
        Ok(out)
    }

    /// Every mirror session (at most MAX_MIRROR_SESSIONS entries: no batching needed), with
    /// `point` 0 as the engine keeps it (the number only names the session in flow keys).
    pub fn read_mirrors(&self) -> Result<Vec<(MirrorKey, MirrorStats)>, KernelError> {
        let mut sessions = mirror_table(&self.ebpf)?;
        for (_, stats) in &mut sessions {
            stats.point = 0;
        }
        Ok(sessions)
    }

    /// Counters summed over CPUs: `[direction][counter]`, `TotalPackets` the sum of the classes.
    pub fn read_counters(&self) -> Result<[[u64; Counter::COUNT as usize]; 2], KernelError> {
        let arr = PerCpuArray::<&MapData, u64>::try_from(map(self, "COUNTERS")?)
            .map_err(map_error("COUNTERS"))?;
        let mut out = [[0u64; Counter::COUNT as usize]; 2];
        for slot in 0..COUNTER_SLOTS {
            let values = arr.get(&slot, 0).map_err(map_error("COUNTERS"))?;
            let sum: u64 = values.iter().sum();
            out[(slot / Counter::COUNT) as usize][(slot % Counter::COUNT) as usize] = sum;
        }
        // The programs count each frame once, in its class.
        for block in &mut out {
            Counter::fill_total(block);
        }
        Ok(out)
    }

    /// Hand every queued event to `f` (timestamps converted to epoch ns); returns how many.
    /// A record of finished data runs is handed as its head (see [`Self::drain_records`]).
    pub fn drain_events(&mut self, mut f: impl FnMut(&Event)) -> usize {
        self.drain_records(|ev, _| f(ev))
    }

    /// Hand every queued record to `f`: its event and, for a record of finished data runs
    /// (`RunBatch`), the runs after it, else none (times converted to epoch ns); returns
    /// how many.
    pub fn drain_records(&mut self, mut f: impl FnMut(&Event, &[DataRun])) -> usize {
        // How full it got: read before every drain, the highest kept for the report.
        if let Some(fill) = self.ring_fill.as_mut() {
            fill.sample();
        }
        let offset = self.epoch_offset_ns;
        let mut n = 0;
        while let Some(item) = self.events.next() {
            if let Some(mut rec) = RunBatch::from_bytes(&item) {
                rec.head.ts_ns = rec.head.ts_ns.saturating_add(offset);
                for r in &mut rec.runs {
                    r.start_ns = r.start_ns.saturating_add(offset);
                    r.end_ns = r.end_ns.saturating_add(offset);
                }
                f(&rec.head, &rec.runs);
                n += 1;
            } else if let Some(mut ev) = Event::from_bytes(&item) {
                ev.ts_ns = ev.ts_ns.saturating_add(offset);
                ev.lossless_to_epoch(offset);
                f(&ev, &[]);
                n += 1;
            }
        }
        n
    }
}
