//! How the parser reads a frame: the kernel's view of its packet buffer and user space's of a
//! captured frame both implement [`PacketView`].

use crate::headers::Header;

/// Read access to one frame.
pub trait PacketView {
    /// Length of the frame as it was on the wire (for byte counters).
    fn frame_len(&self) -> u32;
    /// Copy a `T` from `offset`, or `None` when the frame ends before `offset + size_of::<T>()`.
    fn load<T: Header>(&self, offset: usize) -> Option<T>;
    /// Told where the BTH starts, just before the parser reads it. The default does nothing
    /// (and compiles away in the kernel programs); a view that rewrites RoCE frames records it
    /// (roce-replay shifts PSNs) instead of walking the headers a second time.
    #[inline(always)]
    fn bth_at(&self, _offset: usize) {}
}
