//! Renderers of an engine snapshot.

pub mod files;
pub mod json;
pub mod logdir;
pub mod metrics;
pub mod outputs;
pub mod table;
