//! Captured frames in, parsed frames out: the pcap/pcapng reader ([`capture`]) and the
//! slice-backed [`PacketView`] that lets the shared parser (`roce_observer_common::parse`) run
//! on a captured frame exactly as it runs on a packet in the kernel.

pub mod capture;

use roce_observer_common::{headers::Header, parse::PacketView};

/// A captured frame: the bytes that were captured, and the length the frame had on the wire
/// (the capture's original length, which may exceed `data.len()` when a snap length cut it).
#[derive(Clone, Copy, Debug)]
pub struct SliceView<'a> {
    data: &'a [u8],
    frame_len: u32,
}

impl<'a> SliceView<'a> {
    pub fn new(data: &'a [u8], orig_len: u32) -> SliceView<'a> {
        // A capture never records more than was on the wire; trust the larger of the two so
        // byte counters never undercount a malformed record.
        let frame_len = orig_len.max(u32::try_from(data.len()).unwrap_or(u32::MAX));
        SliceView { data, frame_len }
    }
}

impl PacketView for SliceView<'_> {
    #[inline(always)]
    fn frame_len(&self) -> u32 {
        self.frame_len
    }

    #[inline(always)]
    fn load<T: Header>(&self, offset: usize) -> Option<T> {
        let end = offset.checked_add(core::mem::size_of::<T>())?;
        let bytes = self.data.get(offset..end)?;
        // SAFETY: `bytes` holds exactly size_of::<T>() bytes (checked by `get` above);
        // `read_unaligned` tolerates any alignment. `PacketView::load` is only used with the
        // header types of `roce_observer_common::headers`, which are byte arrays, so every bit
        // pattern is a valid value.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_observer_common::headers::{Bth, EthHdr};

    #[test]
    fn load_is_bounds_checked() {
        let frame = [0u8; 20];
        let v = SliceView::new(&frame, 20);
        assert!(v.load::<EthHdr>(0).is_some());
        assert!(v.load::<EthHdr>(6).is_some());
        assert!(v.load::<EthHdr>(7).is_none());
        assert!(v.load::<Bth>(usize::MAX - 3).is_none());
    }

    #[test]
    fn frame_len_is_the_original_length() {
        let frame = [0u8; 60];
        assert_eq!(SliceView::new(&frame, 1500).frame_len(), 1500);
        assert_eq!(SliceView::new(&frame, 10).frame_len(), 60);
    }
}
