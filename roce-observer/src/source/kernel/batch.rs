//! BPF_MAP_LOOKUP_BATCH (kernel >= 5.6 for hash maps): a whole hash map read in a few syscalls
//! instead of two per entry (get-next-key, lookup). aya 0.14 has no wrapper for it, hence this
//! raw `bpf(2)` call. Callers fall back to per-key iteration when the kernel refuses it.

use std::os::fd::{AsRawFd as _, BorrowedFd};

use aya::Pod;

/// `enum bpf_cmd` value of BPF_MAP_LOOKUP_BATCH (uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// Entries asked for per syscall. A hash bucket's entries come whole: a bucket with more
/// entries than this would fail with ENOSPC (buckets hold a handful).
const CHUNK: usize = 4096;

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Every key and value of the hash map `fd`, one chunk of at most [`CHUNK`] entries at a time
/// into `keys` and `values` (cleared before each chunk; their capacity is kept, so a reader
/// that reuses them allocates nothing once warm, and holds one chunk rather than the whole
/// table), each chunk handed to `each`; or the OS error of the first call that failed (EINVAL
/// or ENOTSUPP on kernels or map types without batch lookups: then nothing was handed over).
/// The kernel writes straight into the vectors' spare room.
pub fn lookup_all_chunks<K: Pod, V: Pod>(
    fd: BorrowedFd<'_>,
    keys: &mut Vec<K>,
    values: &mut Vec<V>,
    mut each: impl FnMut(&mut [K], &mut [V]),
) -> std::io::Result<()> {
    // The batch token of a hash map is a bucket index (u32); room for a u64 is plenty.
    let (mut token_in, mut token_out) = (0u64, 0u64);
    let mut first = true;
    loop {
        keys.clear();
        values.clear();
        keys.reserve(CHUNK);
        values.reserve(CHUNK);
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                std::ptr::from_mut(&mut token_in) as u64
            },
            out_batch: std::ptr::from_mut(&mut token_out) as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        // SAFETY: `attr` points at spare room for `count` keys and values of the map's sizes
        // (K and V are the map's key and value types; both vectors reserved CHUNK) and at two
        // u64 tokens; the kernel writes at most `count` entries and then sets `count` to what
        // it wrote.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                std::ptr::from_mut(&mut attr),
                std::mem::size_of::<BatchAttr>(),
            )
        };
        let err = (rc < 0).then(std::io::Error::last_os_error);
        let got = (attr.count as usize).min(CHUNK);
        // SAFETY: the kernel initialised the first `got` keys and values; K and V are Pod; the
        // room was reserved above.
        unsafe {
            keys.set_len(got);
            values.set_len(got);
        }
        match err {
            None => each(keys, values),
            // ENOENT: the walk reached the end (the last chunk, if any, came with it).
            Some(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                if got > 0 {
                    each(keys, values);
                }
                return Ok(());
            }
            Some(e) => return Err(e),
        }
        token_in = token_out;
        first = false;
    }
}
