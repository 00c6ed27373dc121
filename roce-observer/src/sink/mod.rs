//! Renderers of an engine snapshot.

pub mod json;
pub mod outputs;
pub mod prometheus;
pub mod table;
