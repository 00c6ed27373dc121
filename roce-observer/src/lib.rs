//! roce-observer: per-QP RoCEv2 observation. Sources (kernel maps and ring buffer, or a
//! capture) feed one [`engine::Engine`]; renderers in [`sink`] read its snapshot.

pub mod analyze;
pub mod engine;
pub mod sink;
pub mod wire;
