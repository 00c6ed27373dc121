//! Renderers of an engine snapshot.

pub mod cli;
pub mod json;
pub mod logdir;
pub mod metrics;
pub mod prometheus;
pub mod table;
