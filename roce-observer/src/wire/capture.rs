//! pcap and pcapng reading, streamed: frames are handed to a callback as they are parsed from a
//! bounded buffer, so `tcpdump -w - | roce-observer analyze -` works without holding the capture
//! in memory. Ethernet, Linux cooked (LINUX_SLL, LINUX_SLL2: `tcpdump -i any`) and bare-IP
//! (RAW, IPV4, IPV6) interfaces are read (link.rs); a damaged capture yields every frame before
//! the damage plus a description of the damage.
//!
//! Observation points: a pcap is one point (interface 0, "pcap"), each pcapng interface is one
//! (its `if_name`, or `ifN`). LINUX_SLL2 records the interface each packet was seen on: each
//! interface index becomes a point of its own, named `ifN` (`NAME:ifN` inside a pcapng
//! interface called NAME), so that `tcpdump -i any` on a forwarding host gives its ingress and
//! egress interfaces as two points. Both cooked formats also say whether a packet was received
//! or sent (their packet type): frames carry that as their direction.

use std::{cell::Cell, collections::HashMap, io::Read};

use pcap_parser::{Block, Linktype, PcapBlockOwned, PcapError, create_reader};
use roce_observer_common::Direction;

use super::{
    Link,
    link::{LinkType, cook},
};

/// Initial read buffer; grown for larger records up to [`MAX_BUFFER`].
const INITIAL_BUFFER: usize = 1 << 20;
/// Largest record accepted (a jumbo frame is 9 KiB; anything near this is a corrupt length).
const MAX_BUFFER: usize = 64 << 20;
/// First interface number given to an SLL2 interface index: above any pcapng interface
/// numbering (which counts from 0 in file order).
const SLL2_POINTS_BASE: u32 = 1 << 20;
/// SLL2 interface indices kept apart; packets of further ones stay on their capture interface
/// (a bound for a corrupt or hostile file, far above the interfaces of a host).
const MAX_SLL2_POINTS: usize = 4096;

/// One captured frame.
#[derive(Clone, Copy, Debug)]
pub struct CapturedFrame<'a> {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// The captured bytes (possibly cut by the snap length); without the link header when
    /// `link` is [`Link::Cooked`].
    pub data: &'a [u8],
    /// Length of `data`'s part of the frame on the wire.
    pub orig_len: u32,
    /// The observation point: 0 for pcap; for pcapng the interface's index across all sections
    /// of the file; for LINUX_SLL2 one per interface index (announced as it first appears).
    pub iface: u32,
    /// Received or sent, when the link header says (LINUX_SLL, LINUX_SLL2); else `Capture`.
    pub direction: Direction,
    /// How `data` begins.
    pub link: Link,
}

impl CapturedFrame<'_> {
    /// The frame as an Ethernet frame (a cooked frame behind the Ethernet header the parser
    /// reads in front of it; a malformed one as nothing): for tools that replay captures.
    pub fn to_ethernet(&self) -> Vec<u8> {
        match self.link {
            Link::Ethernet => self.data.to_vec(),
            Link::Cooked(head) => [&head[..], self.data].concat(),
            Link::Malformed => Vec::new(),
        }
    }
}

/// What went wrong with a capture. Errors before the first frame mean nothing could be read;
/// later ones are damage, reported next to the results read up to it.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("the input is empty (expected a pcap or pcapng capture)")]
    Empty,
    #[error(
        "not a pcap or pcapng capture (starts with {0}); write captures with `tcpdump -w FILE` \
         or convert them with `editcap -F pcap IN OUT`"
    )]
    NotACapture(String),
    #[error(
        "link type {0} is not supported: roce-observer reads Ethernet, LINUX_SLL/LINUX_SLL2 \
         (`tcpdump -i any`) and raw IP captures; capture on the Ethernet or RDMA interface \
         itself (`tcpdump -i eth0`), or with `-i any`"
    )]
    LinkType(String),
    #[error("read error: {0}")]
    Io(String),
    #[error(
        "the capture ends in the middle of a record after {frames} frames (file truncated, or \
         the writer was stopped); results cover the frames before it"
    )]
    Truncated { frames: u64 },
    #[error("corrupt capture after {frames} frames ({detail}); results cover the frames before it")]
    Corrupt { frames: u64, detail: String },
}

/// Counts about the capture itself (not about the traffic in it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// "pcap" or "pcapng".
    pub format: &'static str,
    /// Frames handed to the callback.
    pub frames: u64,
    /// Frames whose captured length is below their wire length (snap length).
    pub snap_truncated: u64,
    /// Frames on pcapng interfaces whose link type is not supported (skipped).
    pub skipped_link_type: u64,
    /// The link types of the interfaces read, in the order they were declared.
    pub link_types: Vec<LinkType>,
}

impl CaptureStats {
    fn declare(&mut self, link: LinkType) {
        if !self.link_types.contains(&link) {
            self.link_types.push(link);
        }
    }
}

/// The end of a capture: its counts, and the damage that stopped reading early, if any.
#[derive(Debug)]
pub struct CaptureEnd {
    pub stats: CaptureStats,
    pub error: Option<CaptureError>,
}

/// An interface announced by the capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureIface {
    pub index: u32,
    pub name: String,
    /// The resolution of its timestamps, ns (from the capture header: 1000 for a microsecond
    /// pcap, 1 for a nanosecond one, a pcapng interface's `if_tsresol`).
    pub ts_resolution_ns: u64,
}

/// Nanoseconds per timestamp unit of a clock of `units_per_s` (rounded up: a latency below it
/// was not measurable).
fn ns_per_unit(units_per_s: u64) -> u64 {
    1_000_000_000u64.div_ceil(units_per_s.max(1)).max(1)
}

struct Iface {
    /// `None`: a link type that is not read (its frames are skipped).
    link: Option<LinkType>,
    /// The name announced for it (SLL2 points are named after it).
    name: String,
    /// Timestamp units per second.
    resolution: u64,
    /// Seconds added to every timestamp.
    offset_s: i64,
}

/// Human name of a link type for error messages.
pub fn linktype_name(lt: Linktype) -> String {
    let name = match lt.0 {
        0 => "NULL (BSD loopback)",
        1 => "ETHERNET",
        101 => "RAW (IP without link layer)",
        113 => "LINUX_SLL (tcpdump -i any)",
        127 => "IEEE802_11_RADIOTAP",
        228 => "IPV4",
        229 => "IPV6",
        276 => "LINUX_SLL2 (tcpdump -i any)",
        _ => "",
    };
    // pcap's link type is an unsigned 32-bit field (pcap-parser keeps it as i32).
    let number = lt.0 as u32;
    if name.is_empty() {
        format!("{number}")
    } else {
        format!("{number} {name}")
    }
}

fn hex_prefix(buf: &[u8]) -> String {
    let mut s = String::new();
    for b in buf.iter().take(8) {
        s.push_str(&format!("{b:02x}"));
    }
    if s.is_empty() {
        "nothing".into()
    } else {
        format!("0x{s}")
    }
}

/// How many leading bytes the capture header needs: pcap's 24-byte file header, or pcapng's
/// whole first section header block. `None` when `head` cannot start a capture.
fn header_len(head: &[u8]) -> Option<usize> {
    // Microsecond, nanosecond and "modified" (Kuznetzov) pcap, in either byte order.
    const PCAP_MAGICS: [[u8; 4]; 6] = [
        [0xd4, 0xc3, 0xb2, 0xa1],
        [0xa1, 0xb2, 0xc3, 0xd4],
        [0x4d, 0x3c, 0xb2, 0xa1],
        [0xa1, 0xb2, 0x3c, 0x4d],
        [0x34, 0xcd, 0xb2, 0xa1],
        [0xa1, 0xb2, 0xcd, 0x34],
    ];
    let magic: [u8; 4] = head.get(..4)?.try_into().ok()?;
    if PCAP_MAGICS.contains(&magic) {
        return Some(24);
    }
    if magic != [0x0a, 0x0d, 0x0d, 0x0a] {
        return None;
    }
    // Block length at 4..8 in the byte order given by the byte-order magic at 8..12.
    let (Some(len), Some(bom)) = (head.get(4..8), head.get(8..12)) else {
        return Some(12);
    };
    let len: [u8; 4] = len.try_into().ok()?;
    let n = if bom == [0x4d, 0x3c, 0x2b, 0x1a] {
        u32::from_le_bytes(len)
    } else {
        u32::from_be_bytes(len)
    };
    Some((n as usize).clamp(12, 1 << 20))
}

/// Read a capture from `input`, announcing each pcapng interface to `on_iface` and each
/// Ethernet frame to `on_frame`, in file order. Returns `Err` only when nothing could be read;
/// damage after that is returned in [`CaptureEnd::error`].
pub fn read_capture<R, I, F>(input: R, on_iface: I, on_frame: F) -> CaptureEnd
where
    R: Read + Send,
    I: FnMut(CaptureIface),
    F: FnMut(CapturedFrame<'_>),
{
    read_capture_at(input, on_iface, on_frame, &Cell::new(0))
}

/// [`read_capture`], keeping in `position` how many bytes of the input the records handed on
/// so far take, to the end of the current one (the header included): what a replay has read
/// of a file, whatever the reader has buffered ahead.
pub fn read_capture_at<R, I, F>(
    input: R,
    mut on_iface: I,
    mut on_frame: F,
    position: &Cell<u64>,
) -> CaptureEnd
where
    R: Read + Send,
    I: FnMut(CaptureIface),
    F: FnMut(CapturedFrame<'_>),
{
    let stats = CaptureStats::default();
    // Read the capture header ourselves (a pipe may deliver it in pieces, and the parser
    // probes only its first read), then hand it back to the parser in front of the rest.
    let mut input = input;
    let mut head: Vec<u8> = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    loop {
        let need = match header_len(&head) {
            Some(n) => n,
            None if head.len() < 4 => 4,
            None => break,
        };
        if head.len() >= need {
            break;
        }
        let want = (need - head.len()).min(chunk.len());
        match input.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return CaptureEnd {
                    stats,
                    error: Some(CaptureError::Io(e.to_string())),
                };
            }
        }
    }
    if head.is_empty() {
        return CaptureEnd {
            stats,
            error: Some(CaptureError::Empty),
        };
    }
    match header_len(&head) {
        None => {
            return CaptureEnd {
                stats,
                error: Some(CaptureError::NotACapture(hex_prefix(&head))),
            };
        }
        Some(n) if head.len() < n => {
            return CaptureEnd {
                stats,
                error: Some(CaptureError::Truncated { frames: 0 }),
            };
        }
        Some(_) => {}
    }
    let mut reading = Reading {
        stats,
        ifaces: Vec::new(),
        section_base: 0,
        legacy_ns: false,
        legacy_link: LinkType::Ethernet,
        unsupported: None,
        points: Sll2Points::default(),
        on_iface: &mut on_iface,
        on_frame: &mut on_frame,
    };
    // A plain pcap (not the "modified" format) is read by our own loop, the rest by
    // pcap-parser's readers.
    if let Ok((_, header)) = pcap_parser::parse_pcap_header(&head)
        && !header.is_modified_format()
    {
        let big_endian = header.is_bigendian();
        position.set(header.size() as u64);
        if let Err(e) = reading.block(PcapBlockOwned::LegacyHeader(header)) {
            return reading.end(Some(e));
        }
        let error = read_legacy(input, big_endian, &mut reading, position);
        return reading.end(error);
    }
    let chained = std::io::Cursor::new(head.clone()).chain(input);
    let mut reader = match create_reader(INITIAL_BUFFER, chained) {
        Ok(r) => r,
        Err(PcapError::HeaderNotRecognized) | Err(PcapError::Incomplete(_)) => {
            return reading.end(Some(CaptureError::NotACapture(hex_prefix(&head))));
        }
        Err(e) => return reading.end(Some(CaptureError::Io(format!("{e:?}")))),
    };

    // Bytes of the input the parser has consumed.
    let mut consumed: u64 = 0;
    let mut capacity = INITIAL_BUFFER;
    let error = loop {
        match reader.next() {
            Ok((offset, block)) => {
                // The header and blocks before this one, and this one.
                let end = consumed + offset as u64;
                position.set(end);
                if let Err(e) = reading.block(block) {
                    break Some(e);
                }
                // No shift of the buffer's data per block: refill moves what is left of it.
                reader.consume_noshift(offset);
                consumed = end;
            }
            Err(PcapError::Eof) => break None,
            Err(PcapError::Incomplete(_)) => {
                if let Err(e) = reader.refill() {
                    break Some(CaptureError::Io(format!("{e:?}")));
                }
            }
            Err(PcapError::BufferTooSmall) => {
                if capacity >= MAX_BUFFER || !reader.grow(capacity * 2) {
                    break Some(too_long(reading.stats.frames));
                }
                capacity *= 2;
                if let Err(e) = reader.refill() {
                    break Some(CaptureError::Io(format!("{e:?}")));
                }
            }
            Err(PcapError::UnexpectedEof) => {
                break Some(CaptureError::Truncated {
                    frames: reading.stats.frames,
                });
            }
            Err(PcapError::ReadError) => {
                break Some(CaptureError::Io("the input could not be read".into()));
            }
            Err(e) => {
                let detail = match e {
                    PcapError::NomError(_, kind) => format!("unparsable record: {kind:?}"),
                    PcapError::OwnedNomError(_, kind) => format!("unparsable record: {kind:?}"),
                    PcapError::HeaderNotRecognized => "unknown block".into(),
                    _ => "unparsable record".into(),
                };
                break Some(CaptureError::Corrupt {
                    frames: reading.stats.frames,
                    detail,
                });
            }
        }
    };
    reading.end(error)
}

/// Ask for the cache line at the start of `bytes` (nothing where there is no such hint).
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if !bytes.is_empty() {
        // SAFETY: SSE is part of x86_64; a prefetch is a hint that never faults and reads
        // nothing into the program, here of memory `bytes` owns anyway.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                bytes.as_ptr().cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// A record longer than the buffer may grow to: the capture is corrupt from there.
fn too_long(frames: u64) -> CaptureError {
    CaptureError::Corrupt {
        frames,
        detail: format!("a record longer than {} MiB", MAX_BUFFER >> 20),
    }
}

/// What reading a capture has learned so far, and where its frames go: every block, from our
/// own pcap loop or from pcap-parser's readers, is taken here.
struct Reading<'r, I, F> {
    stats: CaptureStats,
    ifaces: Vec<Iface>,
    /// pcapng interface ids restart in every section; ours continue across sections.
    section_base: u32,
    legacy_ns: bool,
    legacy_link: LinkType,
    /// The first pcapng interface of a link type that is not read.
    unsupported: Option<String>,
    points: Sll2Points,
    on_iface: &'r mut I,
    on_frame: &'r mut F,
}

impl<I, F> Reading<'_, I, F>
where
    I: FnMut(CaptureIface),
    F: FnMut(CapturedFrame<'_>),
{
    /// One block; an error ends the reading there.
    fn block(&mut self, block: PcapBlockOwned<'_>) -> Result<(), CaptureError> {
        match block {
            PcapBlockOwned::LegacyHeader(h) => {
                self.stats.format = "pcap";
                let Some(link) = LinkType::from_linktype(h.network) else {
                    return Err(CaptureError::LinkType(linktype_name(h.network)));
                };
                self.legacy_ns = h.is_nanosecond_precision();
                self.legacy_link = link;
                self.stats.declare(link);
                // An SLL2 capture's points are its interface indices, announced as they
                // appear: none of its frames is on interface 0.
                if link != LinkType::Sll2 {
                    (self.on_iface)(CaptureIface {
                        index: 0,
                        name: "pcap".into(),
                        ts_resolution_ns: legacy_resolution(self.legacy_ns),
                    });
                }
            }
            PcapBlockOwned::Legacy(b) => self.legacy(b.ts_sec, b.ts_usec, b.data, b.origlen),
            PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                self.stats.format = "pcapng";
                self.section_base = u32::try_from(self.ifaces.len()).unwrap_or(u32::MAX);
            }
            PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                let index = u32::try_from(self.ifaces.len()).unwrap_or(u32::MAX);
                let link = LinkType::from_linktype(idb.linktype);
                match link {
                    Some(l) => self.stats.declare(l),
                    None if self.unsupported.is_none() => {
                        self.unsupported = Some(linktype_name(idb.linktype));
                    }
                    None => {}
                }
                let name = match idb.if_name() {
                    Some(Ok(n)) if !n.is_empty() => n.trim_end_matches('\0').to_string(),
                    _ => format!("if{}", index - self.section_base),
                };
                let resolution = idb.ts_resolution().unwrap_or(1_000_000).max(1);
                self.ifaces.push(Iface {
                    link,
                    name: name.clone(),
                    resolution,
                    offset_s: idb.ts_offset(),
                });
                // An SLL2 interface's packets are on its interface indices' points.
                if link != Some(LinkType::Sll2) {
                    (self.on_iface)(CaptureIface {
                        index,
                        name,
                        ts_resolution_ns: ns_per_unit(resolution),
                    });
                }
            }
            PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                let index = self.section_base.saturating_add(epb.if_id);
                match self.ifaces.get(index as usize) {
                    Some(Iface {
                        link: Some(_),
                        resolution,
                        offset_s,
                        ..
                    }) => {
                        let raw = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                        let ns = u128::from(raw) * 1_000_000_000 / u128::from(*resolution);
                        let off = i128::from(*offset_s) * 1_000_000_000;
                        let ts_ns = (ns as i128 + off).clamp(0, u64::MAX as i128) as u64;
                        // `data` carries the block's padding: cut it to the captured length.
                        let data = &epb.data[..(epb.caplen as usize).min(epb.data.len())];
                        let raw = RawFrame {
                            ts_ns,
                            ts_resolution_ns: ns_per_unit(*resolution),
                            data,
                            orig_len: epb.origlen,
                            iface: index,
                        };
                        self.emit_ng(index, raw);
                    }
                    Some(_) => self.stats.skipped_link_type += 1,
                    None => {
                        return Err(CaptureError::Corrupt {
                            frames: self.stats.frames,
                            detail: format!("packet on undeclared interface {}", epb.if_id),
                        });
                    }
                }
            }
            PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                // No timestamp and no interface id: interface 0 of the section.
                match self.ifaces.get(self.section_base as usize) {
                    Some(Iface {
                        link: Some(_),
                        resolution,
                        ..
                    }) => {
                        let data = &spb.data[..(spb.origlen as usize).min(spb.data.len())];
                        let raw = RawFrame {
                            ts_ns: 0,
                            ts_resolution_ns: ns_per_unit(*resolution),
                            data,
                            orig_len: spb.origlen,
                            iface: self.section_base,
                        };
                        self.emit_ng(self.section_base, raw);
                    }
                    _ => self.stats.skipped_link_type += 1,
                }
            }
            PcapBlockOwned::NG(_) => {}
        }
        Ok(())
    }

    /// Hand `raw` on as a frame of pcapng interface `index` (one whose link type is read).
    fn emit_ng(&mut self, index: u32, raw: RawFrame<'_>) {
        if let Some(Iface {
            link: Some(link),
            name,
            ..
        }) = self.ifaces.get(index as usize)
        {
            let (stats, on_iface, on_frame) =
                (&mut self.stats, &mut *self.on_iface, &mut *self.on_frame);
            self.points
                .emit(stats, on_iface, on_frame, *link, name, raw);
        }
    }

    /// One pcap record.
    #[inline(always)]
    fn legacy(&mut self, ts_sec: u32, ts_frac: u32, data: &[u8], orig_len: u32) {
        let frac = if self.legacy_ns {
            u64::from(ts_frac)
        } else {
            u64::from(ts_frac) * 1000
        };
        let raw = RawFrame {
            ts_ns: u64::from(ts_sec) * 1_000_000_000 + frac,
            ts_resolution_ns: legacy_resolution(self.legacy_ns),
            data,
            orig_len,
            iface: 0,
        };
        self.points.emit(
            &mut self.stats,
            self.on_iface,
            self.on_frame,
            self.legacy_link,
            "",
            raw,
        );
    }

    /// The end of the capture, `error` the damage that stopped it, if any.
    fn end(self, error: Option<CaptureError>) -> CaptureEnd {
        // A pcapng file whose only interfaces are of unsupported types: say so instead of
        // "0 frames".
        let error = match (error, self.unsupported) {
            (None, Some(lt)) if self.stats.frames == 0 && self.stats.skipped_link_type > 0 => {
                Some(CaptureError::LinkType(lt))
            }
            (e, _) => e,
        };
        CaptureEnd {
            stats: self.stats,
            error,
        }
    }
}

/// The records of a plain pcap after its header, read from `input` into a buffer of our own
/// and handed on from there. It reads as pcap-parser's `LegacyPcapReader` does and gives the
/// same verdicts: a buffer of [`INITIAL_BUFFER`], doubled for a longer record up to
/// [`MAX_BUFFER`] (corrupt past it), refilled when a record is incomplete; the end of the input
/// inside a record is a truncated capture. Without that reader's block enum and its copy of
/// the buffer's rest on every consume, reading is a fraction of the per-packet cost.
fn read_legacy<R, I, F>(
    mut input: R,
    big_endian: bool,
    reading: &mut Reading<'_, I, F>,
    position: &Cell<u64>,
) -> Option<CaptureError>
where
    R: Read,
    I: FnMut(CaptureIface),
    F: FnMut(CapturedFrame<'_>),
{
    /// A record's header: seconds, fraction, captured and original length.
    const RECORD: usize = 16;
    let word = |b: &[u8], at: usize| {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if big_endian {
            u32::from_be_bytes(w)
        } else {
            u32::from_le_bytes(w)
        }
    };
    let mut buf = vec![0u8; INITIAL_BUFFER];
    // Unread data is buf[start..end].
    let (mut start, mut end) = (0usize, 0usize);
    let mut exhausted = false;
    let mut consumed = position.get();
    loop {
        let available = end - start;
        // The bytes the record at `start` takes, as far as they are known.
        let mut needed = RECORD;
        if available >= RECORD {
            let rec = &buf[start..end];
            let caplen = word(rec, 8) as usize;
            needed = RECORD + caplen;
            if available >= needed {
                // The next record's headers are what the parser reads next: start loading
                // them while this one is taken (the buffer was filled a megabyte ago).
                prefetch(rec.get(needed..).unwrap_or_default());
                prefetch(rec.get(needed + 64..).unwrap_or_default());
                consumed += needed as u64;
                position.set(consumed);
                reading.legacy(
                    word(rec, 0),
                    word(rec, 4),
                    &rec[RECORD..needed],
                    word(rec, 12),
                );
                start += needed;
                continue;
            }
        } else if available == 0 && start == 0 && exhausted {
            return None;
        }
        if exhausted {
            return Some(CaptureError::Truncated {
                frames: reading.stats.frames,
            });
        }
        if needed >= buf.len() {
            if buf.len() >= MAX_BUFFER {
                return Some(too_long(reading.stats.frames));
            }
            buf.resize(buf.len() * 2, 0);
        }
        buf.copy_within(start..end, 0);
        (start, end) = (0, available);
        if end < buf.len() {
            match input.read(&mut buf[end..]) {
                Ok(n) => {
                    exhausted = n == 0;
                    end += n;
                }
                Err(_) => {
                    return Some(CaptureError::Io(format!(
                        "{:?}",
                        PcapError::<&[u8]>::ReadError
                    )));
                }
            }
        }
    }
}

/// The resolution of a pcap's timestamps, ns: its magic says microseconds or nanoseconds.
fn legacy_resolution(nanosecond: bool) -> u64 {
    if nanosecond { 1 } else { 1000 }
}

/// A record as the container gives it, before its link header is read.
struct RawFrame<'a> {
    ts_ns: u64,
    /// The resolution of `ts_ns`, ns.
    ts_resolution_ns: u64,
    data: &'a [u8],
    orig_len: u32,
    iface: u32,
}

/// SLL2 interface indices and the points they became, per capture interface.
#[derive(Default)]
struct Sll2Points {
    points: HashMap<(u32, u32), u32>,
}

impl Sll2Points {
    /// The point of SLL2 interface index `ifindex` on capture interface `iface` (named
    /// `iface_name`, "" for a pcap), announced the first time it is seen.
    fn point<I: FnMut(CaptureIface)>(
        &mut self,
        on_iface: &mut I,
        iface: u32,
        iface_name: &str,
        ifindex: u32,
        ts_resolution_ns: u64,
    ) -> u32 {
        if let Some(&p) = self.points.get(&(iface, ifindex)) {
            return p;
        }
        if self.points.len() >= MAX_SLL2_POINTS {
            return iface;
        }
        let n = u32::try_from(self.points.len()).unwrap_or(u32::MAX);
        let index = SLL2_POINTS_BASE.saturating_add(n);
        self.points.insert((iface, ifindex), index);
        let name = if iface_name.is_empty() {
            format!("if{ifindex}")
        } else {
            format!("{iface_name}:if{ifindex}")
        };
        on_iface(CaptureIface {
            index,
            name,
            ts_resolution_ns,
        });
        index
    }

    /// Read `raw`'s link header and hand the frame on.
    #[inline(always)]
    fn emit<I: FnMut(CaptureIface), F: FnMut(CapturedFrame<'_>)>(
        &mut self,
        stats: &mut CaptureStats,
        on_iface: &mut I,
        on_frame: &mut F,
        link: LinkType,
        iface_name: &str,
        raw: RawFrame<'_>,
    ) {
        stats.frames += 1;
        if (raw.data.len() as u64) < u64::from(raw.orig_len) {
            stats.snap_truncated += 1;
        }
        let mut frame = CapturedFrame {
            ts_ns: raw.ts_ns,
            data: raw.data,
            orig_len: raw.orig_len,
            iface: raw.iface,
            direction: Direction::Capture,
            link: Link::Ethernet,
        };
        if link != LinkType::Ethernet {
            match cook(link, raw.data) {
                Some(c) => {
                    frame.data = &raw.data[c.len..];
                    frame.orig_len = raw.orig_len.saturating_sub(c.len as u32);
                    frame.direction = c.direction;
                    frame.link = Link::Cooked(c.head);
                    if let Some(ifindex) = c.ifindex {
                        frame.iface = self.point(
                            on_iface,
                            raw.iface,
                            iface_name,
                            ifindex,
                            raw.ts_resolution_ns,
                        );
                    }
                }
                None => {
                    frame.data = &[];
                    frame.link = Link::Malformed;
                }
            }
        }
        on_frame(frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_types_print_unsigned() {
        assert_eq!(linktype_name(Linktype(-1)), "4294967295");
        assert_eq!(linktype_name(Linktype(1)), "1 ETHERNET");
        assert_eq!(linktype_name(Linktype(147)), "147");
    }
}
