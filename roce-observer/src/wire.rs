//! Captured frames in, parsed frames out: the pcap/pcapng reader ([`capture`]), the link
//! headers that are not Ethernet ([`link`]: `tcpdump -i any`, bare IP), and the slice-backed
//! [`PacketView`]s that let the shared parser (`roce_observer_common::parse`) run on a
//! captured frame exactly as it runs on a packet in the kernel.

pub mod capture;
pub mod link;

use roce_observer_common::{
    headers::{EthHdr, Header},
    parse::PacketView,
};

/// How a captured frame's bytes begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// An Ethernet frame.
    Ethernet,
    /// The network layer: its link header (SLL, SLL2) was read and left out, or there was
    /// none (RAW). The shared parser reads this Ethernet header in front of it ([`CookedView`]).
    Cooked([u8; EthHdr::LEN]),
    /// A link header cut short: the frame is counted malformed.
    Malformed,
}

/// Copy a `T` out of exactly `size_of::<T>()` bytes.
#[inline(always)]
fn read<T: Header>(bytes: &[u8]) -> Option<T> {
    if bytes.len() != core::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: `bytes` holds exactly size_of::<T>() bytes (checked above); `read_unaligned`
    // tolerates any alignment. `Header` types are byte arrays, so every bit pattern is a
    // valid value.
    Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

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
        read(self.data.get(offset..end)?)
    }
}

/// A frame without an Ethernet header (SLL, SLL2, RAW), seen by the shared parser as the
/// Ethernet frame it would have been: `head` in front of the network layer `data`. The frame
/// length counts those 14 bytes instead of the link header, so that byte counters and the path
/// MTU learned from frame lengths mean the same as on Ethernet captures.
#[derive(Clone, Copy, Debug)]
pub struct CookedView<'a> {
    head: [u8; EthHdr::LEN],
    data: &'a [u8],
    frame_len: u32,
}

impl<'a> CookedView<'a> {
    /// `orig_len`: the network layer's length on the wire (the link header left out).
    pub fn new(head: [u8; EthHdr::LEN], data: &'a [u8], orig_len: u32) -> CookedView<'a> {
        let data_len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let frame_len = orig_len.max(data_len).saturating_add(EthHdr::LEN as u32);
        CookedView {
            head,
            data,
            frame_len,
        }
    }
}

/// Largest header the parser loads across the end of `head` (none does today: the Ethernet
/// header is loaded whole at 0, everything else after it; this keeps a future one correct).
const STRADDLE_MAX: usize = 64;

impl PacketView for CookedView<'_> {
    #[inline(always)]
    fn frame_len(&self) -> u32 {
        self.frame_len
    }

    #[inline(always)]
    fn load<T: Header>(&self, offset: usize) -> Option<T> {
        let size = core::mem::size_of::<T>();
        let end = offset.checked_add(size)?;
        const H: usize = EthHdr::LEN;
        if offset >= H {
            return read(self.data.get(offset - H..end - H)?);
        }
        if end <= H {
            return read(&self.head[offset..end]);
        }
        if size > STRADDLE_MAX {
            return None;
        }
        let mut buf = [0u8; STRADDLE_MAX];
        buf[..H - offset].copy_from_slice(&self.head[offset..]);
        buf[H - offset..size].copy_from_slice(self.data.get(..end - H)?);
        read(&buf[..size])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_observer_common::headers::{Bth, EthHdr, VlanHdr};

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

    #[test]
    fn cooked_view_reads_the_head_then_the_network_layer() {
        let head = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x81, 0x00];
        let data = [0x60, 0x05, 0x08, 0x00, 0x45];
        let v = CookedView::new(head, &data, 5);
        assert_eq!(v.frame_len(), 19);
        let eth = v.load::<EthHdr>(0).expect("the head");
        assert_eq!(eth.ethertype(), 0x8100);
        assert_eq!(eth.src_mac(), [7, 8, 9, 10, 11, 12]);
        let tag = v.load::<VlanHdr>(14).expect("after the head");
        assert_eq!((tag.pcp(), tag.ethertype()), (3, 0x0800));
        // Across the end of the head: the last 2 bytes of it and the first 2 of the data.
        let across = v.load::<VlanHdr>(12).expect("straddling");
        assert_eq!(across.0, [0x81, 0x00, 0x60, 0x05]);
        assert!(v.load::<VlanHdr>(16).is_none(), "past the end");
        assert!(v.load::<EthHdr>(usize::MAX - 3).is_none());
    }
}
