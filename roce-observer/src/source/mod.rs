//! Event sources: the kernel programs (live) and captures (`analyze`, see crate::wire).

pub mod hw;
pub mod kernel;
