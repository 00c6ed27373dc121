//! `run --kernel-log`: the kernel programs' aya-log records (roce-observer-ebpf/src/diag.rs:
//! flow table full, ring buffer full, the first frame of each header combination per CPU),
//! read from aya-log's ring buffer and kept as lines for the live loop to show (stderr, or
//! after the terminal UI closes: live.rs).
//!
//! Off by default: the loader then sets the programs' `KERNEL_LOG` and aya-log's
//! `AYA_LOG_LEVEL` to 0, so the verifier removes the logging code, and nothing reads here.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use aya::Ebpf;
use aya_log::EbpfLogger;
use roce_observer_common::frame_kind::Described;

use super::KernelError;

/// Lines kept between two reads; older ones are counted, not kept.
const MAX_LINES: usize = 1000;

/// `AYA_LOG_LEVEL` for the programs: Info and above when on, nothing when off.
pub fn level(on: bool) -> u8 {
    if on { aya_log::Level::Info as u8 } else { 0 }
}

#[derive(Default)]
struct Lines {
    lines: VecDeque<String>,
    dropped: u64,
}

/// The `log::Log` aya-log hands each record to: it turns it into a line.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Lines>>);

impl log::Log for Sink {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let text = record.args().to_string();
        // The programs log a frame kind as its number; its meaning is user space's to say.
        let line = match (record.target(), text.parse::<u32>()) {
            ("frame_kind", Ok(kind)) => {
                format!("first frame of its kind on a CPU: {}", Described(kind))
            }
            _ => text,
        };
        let mut l = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if l.lines.len() >= MAX_LINES {
            l.lines.pop_front();
            l.dropped += 1;
        }
        l.lines.push_back(line);
    }

    fn flush(&self) {}
}

/// The reader of aya-log's ring buffer and the lines read.
pub struct Reader {
    logger: EbpfLogger<Sink>,
    sink: Sink,
}

impl Reader {
    pub fn start(ebpf: &mut Ebpf) -> Result<Reader, KernelError> {
        let sink = Sink::default();
        let logger = EbpfLogger::init_with_logger(ebpf, sink.clone()).map_err(|e| {
            KernelError::Load(format!("reading the kernel log (aya-log): {e}").into())
        })?;
        Ok(Reader { logger, sink })
    }

    /// Everything logged since the last call, oldest first.
    pub fn take(&mut self) -> Vec<String> {
        self.logger.flush();
        let mut l = self
            .sink
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<String> = l.lines.drain(..).collect();
        if l.dropped > 0 {
            out.insert(0, format!("{} older kernel log lines dropped", l.dropped));
            l.dropped = 0;
        }
        out
    }
}
