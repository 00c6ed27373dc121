//! Bounds-checked packet access for the shared parser: direct packet access for XDP, and for
//! TC a copy of the frame's first `HEAD_BYTES` made with one `bpf_skb_load_bytes` into a
//! per-CPU scratch buffer (an egress skb may keep its headers in paged fragments; the helper
//! reads them without changing the skb). Reading the headers out of map memory instead of
//! one helper call per header into stack buffers is what lets the TC program run the
//! two-pass (mirror, then mirrored frame) parse within the 512-byte BPF stack.

use core::mem;

use aya_ebpf::{
    check_bounds_signed,
    helpers::{bpf_skb_load_bytes, bpf_xdp_get_buff_len},
    programs::{TcContext, XdpContext},
};
use roce_observer_common::{headers::Header, packet::PacketView};

use crate::maps::{HEAD_BYTES, TC_HEAD};

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

pub struct TcView {
    /// The scratch copy of the frame's head (null when the scratch map lookup failed).
    head: *const u8,
    /// Bytes of the head copied (0 when nothing could be read).
    copied: usize,
    len: u32,
}

impl TcView {
    #[inline(always)]
    pub fn new(ctx: &TcContext) -> TcView {
        let len = ctx.len();
        let mut view = TcView {
            head: core::ptr::null(),
            copied: 0,
            len,
        };
        let Some(head) = TC_HEAD.get_ptr_mut(0) else {
            return view;
        };
        let want = if len as usize > HEAD_BYTES {
            HEAD_BYTES
        } else {
            len as usize
        };
        // The verifier must see a non-zero size no larger than the buffer.
        if !check_bounds_signed(want as i64, 1, HEAD_BYTES as i64) {
            return view;
        }
        // SAFETY: `head` is a per-CPU map value of HEAD_BYTES bytes, `want` is within 1..=
        // HEAD_BYTES and within the skb (len); the helper only reads the skb.
        let ret =
            unsafe { bpf_skb_load_bytes(ctx.skb.skb as *const _, 0, head.cast(), want as u32) };
        if ret == 0 {
            view.head = head.cast();
            view.copied = want;
        }
        view
    }
}

impl PacketView for TcView {
    #[inline(always)]
    fn frame_len(&self) -> u32 {
        self.len
    }

    #[inline(always)]
    fn load<T: Header>(&self, offset: usize) -> Option<T> {
        let size = mem::size_of::<T>();
        // Headers past the copied head read as absent, as past the end of a frame.
        if self.head.is_null() || offset + size > self.copied {
            return None;
        }
        // The verifier does not carry the check above over to the pointer (the compiler adds
        // the offset to the pointer first), so bound the offset itself where the verifier sees
        // it: masked to HEAD_BYTES - 1 in an instruction the compiler cannot drop (a no-op
        // here: offset < copied <= HEAD_BYTES), and the buffer is 2 * HEAD_BYTES long.
        let at: u64;
        // SAFETY: ALU operations on registers, no memory access.
        unsafe { core::arch::asm!("{0} = {1}", "{0} &= 255", out(reg) at, in(reg) offset as u64) };
        const _: () = assert!(HEAD_BYTES == 256);
        // SAFETY: at == offset and offset + size <= copied <= HEAD_BYTES, inside the scratch map
        // value that `new` filled; T is a byte-array header (any bit pattern valid), read
        // unaligned.
        Some(unsafe { core::ptr::read_unaligned(self.head.add(at as usize) as *const T) })
    }
}
