//! Bounds-checked packet access for the shared parser: direct packet access for XDP, and
//! `bpf_skb_load_bytes` for TC (an egress skb may keep its headers in paged fragments; the
//! helper reads them without changing the skb).

use core::mem;

use aya_ebpf::{
    helpers::bpf_xdp_get_buff_len,
    programs::{TcContext, XdpContext},
};
use roce_observer_common::{headers::Header, parse::PacketView};

pub struct XdpView {
    start: usize,
    end: usize,
    /// Whole frame, all buffers of a multi-buffer (jumbo) frame included.
    len: u32,
}

impl XdpView {
    /// A frame that may span several buffers (a program loaded with XDP frags, 5.18+).
    #[inline(always)]
    pub fn multi_buffer(ctx: &XdpContext) -> XdpView {
        // SAFETY: the helper reads the context the kernel passed in.
        let len = unsafe { bpf_xdp_get_buff_len(ctx.ctx) } as u32;
        XdpView {
            start: ctx.data(),
            end: ctx.data_end(),
            len,
        }
    }

    /// A frame in one buffer (a program loaded without frags): its length is the buffer's.
    #[inline(always)]
    pub fn single_buffer(ctx: &XdpContext) -> XdpView {
        let (start, end) = (ctx.data(), ctx.data_end());
        XdpView {
            start,
            end,
            len: (end - start) as u32,
        }
    }
}

impl PacketView for XdpView {
    #[inline(always)]
    fn frame_len(&self) -> u32 {
        self.len
    }

    #[inline(always)]
    fn load<T: Header>(&self, offset: usize) -> Option<T> {
        // The verifier needs this exact comparison of packet pointers before any access.
        if self.start + offset + mem::size_of::<T>() > self.end {
            return None;
        }
        // SAFETY: [start + offset, start + offset + size_of::<T>()) lies inside the packet, as
        // checked above; T is a byte-array header (any bit pattern valid), read unaligned.
        Some(unsafe { core::ptr::read_unaligned((self.start + offset) as *const T) })
    }
}

pub struct TcView<'a> {
    ctx: &'a TcContext,
}

impl<'a> TcView<'a> {
    #[inline(always)]
    pub fn new(ctx: &'a TcContext) -> TcView<'a> {
        TcView { ctx }
    }
}

impl PacketView for TcView<'_> {
    #[inline(always)]
    fn frame_len(&self) -> u32 {
        self.ctx.len()
    }

    #[inline(always)]
    fn load<T: Header>(&self, offset: usize) -> Option<T> {
        self.ctx.load::<T>(offset).ok()
    }
}
