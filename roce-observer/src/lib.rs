//! roce-observer: per-QP RoCEv2 observation. One pipeline: sources (kernel programs, captures)
//! -> one analysis state ([`engine::Engine`]) -> renderers ([`sink`]) that read its snapshot.

pub mod analyze;
pub mod cli;
pub mod color;
pub mod counters;
pub mod derived;
pub mod engine;
pub mod fail_on;
pub mod format;
pub mod live;
pub mod run;
pub mod severity;
pub mod sink;
pub mod source;
pub mod tui;
pub mod wire;
