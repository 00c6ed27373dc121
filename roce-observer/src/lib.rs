//! roce-observer: per-QP RoCEv2 observation. One pipeline: sources (kernel programs, captures)
//! -> one analysis state (engine) -> renderers (sinks).

pub mod source;
