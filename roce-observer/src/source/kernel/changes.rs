//! A report tick's read of the flow table: only the flows the kernel listed as changed
//! (roce-observer-common/src/changes.rs, roce-observer-ebpf/src/changes.rs), where a whole read
//! copied every flow (848 bytes each: 50 MB at 100,000 flows, most of a tick's work). The whole
//! table is read instead at the first tick of a reader, when a list had no room for a change,
//! when more than a quarter of the flows changed (one batched read of them all is then about as
//! cheap), and on a kernel that does not let the lists be mapped.
//!
//! The epoch and the lists are read and written through shared mappings of their arrays
//! (BPF_F_MMAPABLE), and the listed flows are copied out by the gather program
//! (roce-observer-ebpf/src/gather.rs), `GATHER` flows per BPF_PROG_TEST_RUN: one syscall per
//! 64 changed flows, where a lookup syscall each cost about 1.8 us in a VM.

use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    ptr::NonNull,
};

use roce_observer_common::{
    FlowKey, FlowStats,
    changes::{
        CHANGE_EPOCH_ENTRIES, CHANGE_SLOTS, ChangeHead, GATHER, Listed, list, listed_flow, slot,
    },
    flow::FlowKey6,
};

use super::{KernelSource, error::KernelError, fingerprint};

/// How [`KernelSource::read_flow_changes`] read the flow table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowRead {
    /// Every entry, `flows` of them (those unchanged since the reader's last whole read were
    /// not handed over again).
    Whole { flows: usize },
    /// The `listed` flows of the change lists, each looked up and handed over.
    Changed { listed: usize },
}

/// A whole read is made when more than this share of the flows the last whole read found are
/// listed: a batched read of every flow costs about half of copying one listed flow out (its
/// entry is read from memory twice, by the gather program and from its copy).
const WHOLE_READ_SHARE: usize = 4;

/// A shared mapping of the first `len` elements of a BPF array map of `T` made with
/// BPF_F_MMAPABLE: the values lie from offset 0, each in a slot of its size rounded up to 8
/// bytes.
struct Mapped<T> {
    ptr: NonNull<u8>,
    len: usize,
    bytes: usize,
    _value: std::marker::PhantomData<T>,
}

impl<T: Copy> Mapped<T> {
    /// Map `len` elements of the array `fd`, read-only or read-write; None if the kernel
    /// refuses (the map was not made mappable).
    fn map(fd: std::os::fd::BorrowedFd<'_>, len: usize, write: bool) -> Option<Mapped<T>> {
        // SAFETY: sysconf has no memory effects.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let bytes = (len * Self::STRIDE).next_multiple_of(page).max(page);
        let prot = if write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of the array's values from offset 0 (where the kernel
        // puts them in a mappable array, rounded up to pages); nothing else refers to the new
        // address.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return None;
        }
        Some(Mapped {
            ptr: NonNull::new(addr.cast())?,
            len,
            bytes,
            _value: std::marker::PhantomData,
        })
    }

    /// Bytes from one element to the next (the kernel's `round_up(value_size, 8)`).
    const STRIDE: usize = size_of::<T>().next_multiple_of(8);

    /// Element `i`'s address.
    fn at(&self, i: usize) -> *mut T {
        assert!(i < self.len, "element {i} of {}", self.len);
        const { assert!(align_of::<T>() <= 8) };
        // SAFETY: within the mapping (checked above: `len` slots of STRIDE bytes were mapped),
        // and 8-byte aligned (page-aligned start, STRIDE a multiple of 8).
        unsafe { self.ptr.as_ptr().add(i * Self::STRIDE).cast() }
    }

    /// Element `i` as it is now (the kernel may write it at any time: read volatile).
    fn get(&self, i: usize) -> T {
        // SAFETY: a valid, aligned element (`at`); any bit pattern is a `T` (plain integer
        // structs of the ABI crate).
        unsafe { std::ptr::read_volatile(self.at(i)) }
    }

    /// Write element `i` (a read-write mapping only).
    fn set(&self, i: usize, v: T) {
        // SAFETY: as in `get`; the mapping was made writable by the only caller that sets.
        unsafe { std::ptr::write_volatile(self.at(i), v) }
    }
}

impl<T> Drop for Mapped<T> {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with `bytes` bytes and not used after this.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}

// SAFETY: the pointer is to a mapping owned by the value alone (made in `map`, removed in
// `drop`); accessing it from another thread is as sound as from this one.
unsafe impl<T> Send for Mapped<T> {}

/// The gather program's arrays (roce-observer-ebpf/src/gather.rs), mapped.
struct Gather {
    keys: Mapped<FlowKey6>,
    flows: Mapped<FlowStats>,
    found: Mapped<u32>,
}

/// The mapped change lists and what user space knows of its reads.
pub(super) struct ChangeLists {
    epochs: Mapped<u32>,
    heads: Mapped<ChangeHead>,
    keys: Mapped<FlowKey6>,
    gather: Gather,
    cpus: u32,
    /// Keys per list (the loader's `CHANGE_CAP`).
    cap: u32,
    /// The epoch now (`CHANGE_EPOCH[0]`).
    epoch: u32,
    /// The reader that was handed every change up to the tick that began this epoch.
    reader: Option<u64>,
    /// Flows found by the last whole read.
    known: usize,
    /// The listed keys of the tick under way.
    listed: Vec<FlowKey6>,
}

/// The epoch after `e` (0 is skipped: it is a new flow entry's).
fn after(e: u32) -> u32 {
    e.checked_add(1).unwrap_or(1)
}

/// The epoch before `e`.
fn before(e: u32) -> u32 {
    if e <= 1 { u32::MAX } else { e - 1 }
}

impl ChangeLists {
    /// The first epoch, set by the loader before the programs are attached: a new entry (epoch
    /// 0) is then always listed.
    pub(super) const FIRST_EPOCH: u32 = 1;

    /// Map the loaded programs' change maps (`cpus` CPUs, `cap` keys per list); None when the
    /// kernel refuses a mapping (every tick then reads the whole table).
    pub(super) fn map(ebpf: &aya::Ebpf, cpus: u32, cap: u32) -> Option<ChangeLists> {
        let fd = |name: &str| match ebpf.map(name)? {
            aya::maps::Map::Array(data) => data.fd().as_fd().try_clone_to_owned().ok(),
            _ => None,
        };
        let lists = (cpus * CHANGE_SLOTS) as usize;
        let epochs = Mapped::map(
            fd("CHANGE_EPOCH")?.as_fd(),
            CHANGE_EPOCH_ENTRIES as usize,
            true,
        )?;
        let heads = Mapped::map(fd("CHANGE_HEADS")?.as_fd(), lists, false)?;
        let keys = Mapped::map(fd("CHANGE_KEYS")?.as_fd(), lists * cap as usize, false)?;
        let g = GATHER as usize;
        let gather = Gather {
            keys: Mapped::map(fd("GATHER_KEYS")?.as_fd(), g, true)?,
            flows: Mapped::map(fd("GATHER_FLOWS")?.as_fd(), g, false)?,
            found: Mapped::map(fd("GATHER_FOUND")?.as_fd(), 1 + g, true)?,
        };
        epochs.set(0, Self::FIRST_EPOCH);
        Some(ChangeLists {
            epochs,
            heads,
            keys,
            gather,
            cpus,
            cap,
            epoch: Self::FIRST_EPOCH,
            reader: None,
            known: 0,
            listed: Vec::new(),
        })
    }

    /// Begin a tick for `reader`: move to the next epoch (the flows changed from now on are
    /// listed in it), then gather the flows listed in the two epochs before it. False when the
    /// whole table must be read (the reader's first tick, a list without room, too many).
    fn begin(&mut self, reader: u64) -> bool {
        let last = self.epoch;
        self.epoch = after(last);
        self.epochs.set(0, self.epoch);
        let continued = self.reader.take() == Some(reader);
        self.listed.clear();
        if !continued {
            return false;
        }
        let epochs = [last, before(last)];
        if epochs
            .iter()
            .any(|&e| self.epochs.get(1 + slot(e) as usize) == e)
        {
            return false;
        }
        for e in epochs {
            for cpu in 0..self.cpus {
                let l = list(cpu, e);
                let head = self.heads.get(l as usize);
                if head.epoch != e {
                    continue;
                }
                let start = (l * self.cap) as usize;
                let n = head.count.min(self.cap) as usize;
                self.listed
                    .extend((start..start + n).map(|i| self.keys.get(i)));
            }
        }
        // A flow changed in both epochs, or on two CPUs, is read once.
        self.listed
            .sort_unstable_by(|a, b| super::pod_bytes(a).cmp(super::pod_bytes(b)));
        self.listed.dedup();
        self.listed.len() <= self.known / WHOLE_READ_SHARE
    }

    /// The tick is done: `reader` was handed every change (and the whole table's `whole` flows
    /// when it was read whole).
    fn done(&mut self, reader: u64, whole: Option<usize>) {
        self.reader = Some(reader);
        if let Some(n) = whole {
            self.known = n;
        }
    }
}

impl KernelSource {
    /// A report tick's read of the flow table for `reader` (an engine's id): every flow that
    /// may have changed since the reader's last tick handed to `each`, with its key expanded
    /// and its times converted as [`KernelSource::read_flows`] does. Successive ticks of one
    /// reader read only the flows the kernel listed as changed (module doc); a whole read hands
    /// over only the entries that differ from the reader's last whole read (`fingerprint`).
    /// The values are absolute, so a reader gets the same values either way.
    pub fn read_flow_changes(
        &mut self,
        reader: u64,
        mut each: impl FnMut(&FlowKey, &FlowStats),
    ) -> Result<FlowRead, KernelError> {
        let listed = self
            .changes
            .as_mut()
            .and_then(|c| c.begin(reader).then(|| std::mem::take(&mut c.listed)));
        if let Some(listed) = listed {
            let read = self.read_listed(&listed, &mut each);
            let n = listed.len();
            if let Some(c) = self.changes.as_mut() {
                c.listed = listed;
            }
            read?;
            if let Some(c) = self.changes.as_mut() {
                c.done(reader, None);
            }
            return Ok(FlowRead::Changed { listed: n });
        }
        let b = &mut self.flow_buffers;
        let same_reader = b.engine.take() == Some(reader);
        let prints = std::mem::take(&mut b.prints);
        let mut next = std::mem::take(&mut b.next_prints);
        next.clear();
        self.read_flow_table(|key, stats| {
            let print = fingerprint(key, stats);
            if !(same_reader && prints.get(next.len()) == Some(&print)) {
                each(key, stats);
            }
            next.push(print);
        })?;
        let b = &mut self.flow_buffers;
        let flows = next.len();
        // The read under way, all handed to `reader`, becomes the last one.
        b.prints = next;
        b.next_prints = prints;
        b.engine = Some(reader);
        if let Some(c) = self.changes.as_mut() {
            c.done(reader, Some(flows));
        }
        Ok(FlowRead::Whole { flows })
    }

    /// Copy the listed flows out (`FLOWS4` or `FLOWS6` by their keys), `GATHER` per run of the
    /// gather program, and hand them to `each` as the whole read does; a flow no longer there
    /// is skipped.
    fn read_listed(
        &self,
        listed: &[FlowKey6],
        each: &mut impl FnMut(&FlowKey, &FlowStats),
    ) -> Result<(), KernelError> {
        // Listed flows come from the mapped lists: there is a gather program to copy them.
        let Some(gather) = self.changes.as_ref().map(|c| &c.gather) else {
            return Ok(());
        };
        let mut sessions = super::maps::Sessions::new(&self.ebpf);
        // The program ignores the frame; test runs want one of an Ethernet header at least.
        let frame = [0u8; 64];
        for chunk in listed.chunks(GATHER as usize) {
            for (i, k) in chunk.iter().enumerate() {
                gather.keys.set(i, *k);
            }
            gather.found.set(0, chunk.len() as u32);
            super::test_run::run(self, super::GATHER_PROGRAM, &frame, 1)?;
            for (i, k) in chunk.iter().enumerate() {
                if gather.found.get(1 + i) == 0 {
                    continue;
                }
                let key = match listed_flow(k) {
                    Listed::V4(k4) => k4.expand(|p| sessions.get(p)),
                    Listed::V6(k6) => k6.expand(|p| sessions.get(p)),
                };
                // A flow of a mirror session not read yet is left to the next tick, as in
                // the whole read.
                if let Some(key) = key {
                    let mut stats = gather.flows.get(i);
                    self.flow_to_epoch(&mut stats);
                    each(&key, &stats);
                }
            }
        }
        sessions.result()
    }
}
