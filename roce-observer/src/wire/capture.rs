//! pcap and pcapng reading, streamed: frames are handed to a callback as they are parsed from a
//! bounded buffer, so `tcpdump -w - | roce-observer analyze -` works without holding the capture
//! in memory. Only Ethernet interfaces are read; a damaged capture yields every frame before the
//! damage plus a description of the damage.

use std::io::Read;

use pcap_parser::{Block, Linktype, PcapBlockOwned, PcapError, create_reader};

/// Initial read buffer; grown for larger records up to [`MAX_BUFFER`].
const INITIAL_BUFFER: usize = 1 << 20;
/// Largest record accepted (a jumbo frame is 9 KiB; anything near this is a corrupt length).
const MAX_BUFFER: usize = 64 << 20;

/// One captured frame.
#[derive(Clone, Copy, Debug)]
pub struct CapturedFrame<'a> {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// The captured bytes (possibly cut by the snap length).
    pub data: &'a [u8],
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// 0 for pcap; for pcapng the interface's index across all sections of the file.
    pub iface: u32,
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
        "link type {0} is not Ethernet: roce-observer reads Ethernet captures only; capture on \
         the Ethernet or RDMA interface itself (`tcpdump -i eth0` or `tcpdump -i mlx5_0`), not \
         `-i any`"
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
    /// Frames on pcapng interfaces whose link type is not Ethernet (skipped).
    pub skipped_link_type: u64,
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
}

struct Iface {
    ethernet: bool,
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
        276 => "LINUX_SLL2 (tcpdump -i any)",
        _ => "",
    };
    if name.is_empty() {
        format!("{}", lt.0)
    } else {
        format!("{} {}", lt.0, name)
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
pub fn read_capture<R, I, F>(input: R, mut on_iface: I, mut on_frame: F) -> CaptureEnd
where
    R: Read + Send,
    I: FnMut(CaptureIface),
    F: FnMut(CapturedFrame<'_>),
{
    let mut stats = CaptureStats::default();
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
    let chained = std::io::Cursor::new(head.clone()).chain(input);
    let mut reader = match create_reader(INITIAL_BUFFER, chained) {
        Ok(r) => r,
        Err(PcapError::HeaderNotRecognized) | Err(PcapError::Incomplete(_)) => {
            return CaptureEnd {
                stats,
                error: Some(CaptureError::NotACapture(hex_prefix(&head))),
            };
        }
        Err(e) => {
            return CaptureEnd {
                stats,
                error: Some(CaptureError::Io(format!("{e:?}"))),
            };
        }
    };

    let mut ifaces: Vec<Iface> = Vec::new();
    // pcapng interface ids restart in every section; ours continue across sections.
    let mut section_base: u32 = 0;
    let mut legacy_ns = false;
    let mut capacity = INITIAL_BUFFER;
    let mut non_ethernet: Option<String> = None;
    let error = loop {
        match reader.next() {
            Ok((offset, block)) => {
                match block {
                    PcapBlockOwned::LegacyHeader(h) => {
                        stats.format = "pcap";
                        if h.network != Linktype::ETHERNET {
                            break Some(CaptureError::LinkType(linktype_name(h.network)));
                        }
                        legacy_ns = h.is_nanosecond_precision();
                        on_iface(CaptureIface {
                            index: 0,
                            name: "pcap".into(),
                        });
                    }
                    PcapBlockOwned::Legacy(b) => {
                        let frac = if legacy_ns {
                            u64::from(b.ts_usec)
                        } else {
                            u64::from(b.ts_usec) * 1000
                        };
                        let ts_ns = u64::from(b.ts_sec) * 1_000_000_000 + frac;
                        emit(&mut stats, &mut on_frame, ts_ns, b.data, b.origlen, 0);
                    }
                    PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                        stats.format = "pcapng";
                        section_base = u32::try_from(ifaces.len()).unwrap_or(u32::MAX);
                    }
                    PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                        let index = u32::try_from(ifaces.len()).unwrap_or(u32::MAX);
                        let ethernet = idb.linktype == Linktype::ETHERNET;
                        if !ethernet && non_ethernet.is_none() {
                            non_ethernet = Some(linktype_name(idb.linktype));
                        }
                        let name = match idb.if_name() {
                            Some(Ok(n)) if !n.is_empty() => n.trim_end_matches('\0').to_string(),
                            _ => format!("if{}", index - section_base),
                        };
                        ifaces.push(Iface {
                            ethernet,
                            resolution: idb.ts_resolution().unwrap_or(1_000_000).max(1),
                            offset_s: idb.ts_offset(),
                        });
                        on_iface(CaptureIface { index, name });
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                        let index = section_base.saturating_add(epb.if_id);
                        match ifaces.get(index as usize) {
                            Some(i) if i.ethernet => {
                                let raw = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                                let ns = u128::from(raw) * 1_000_000_000 / u128::from(i.resolution);
                                let off = i128::from(i.offset_s) * 1_000_000_000;
                                let ts_ns = (ns as i128 + off).clamp(0, u64::MAX as i128) as u64;
                                // `data` carries the block's padding: cut it to the captured length.
                                let data = &epb.data[..(epb.caplen as usize).min(epb.data.len())];
                                emit(&mut stats, &mut on_frame, ts_ns, data, epb.origlen, index);
                            }
                            Some(_) => stats.skipped_link_type += 1,
                            None => {
                                break Some(CaptureError::Corrupt {
                                    frames: stats.frames,
                                    detail: format!("packet on undeclared interface {}", epb.if_id),
                                });
                            }
                        }
                    }
                    PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                        // No timestamp and no interface id: interface 0 of the section.
                        match ifaces.get(section_base as usize) {
                            Some(i) if i.ethernet => {
                                let data = &spb.data[..(spb.origlen as usize).min(spb.data.len())];
                                emit(
                                    &mut stats,
                                    &mut on_frame,
                                    0,
                                    data,
                                    spb.origlen,
                                    section_base,
                                );
                            }
                            _ => stats.skipped_link_type += 1,
                        }
                    }
                    PcapBlockOwned::NG(_) => {}
                }
                reader.consume(offset);
            }
            Err(PcapError::Eof) => break None,
            Err(PcapError::Incomplete(_)) => {
                if let Err(e) = reader.refill() {
                    break Some(CaptureError::Io(format!("{e:?}")));
                }
            }
            Err(PcapError::BufferTooSmall) => {
                if capacity >= MAX_BUFFER || !reader.grow(capacity * 2) {
                    break Some(CaptureError::Corrupt {
                        frames: stats.frames,
                        detail: format!("a record longer than {} MiB", MAX_BUFFER >> 20),
                    });
                }
                capacity *= 2;
                if let Err(e) = reader.refill() {
                    break Some(CaptureError::Io(format!("{e:?}")));
                }
            }
            Err(PcapError::UnexpectedEof) => {
                break Some(CaptureError::Truncated {
                    frames: stats.frames,
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
                    frames: stats.frames,
                    detail,
                });
            }
        }
    };
    // A pcapng file whose only interfaces are not Ethernet: say so instead of "0 frames".
    let error = match (error, non_ethernet) {
        (None, Some(lt)) if stats.frames == 0 && stats.skipped_link_type > 0 => {
            Some(CaptureError::LinkType(lt))
        }
        (e, _) => e,
    };
    CaptureEnd { stats, error }
}

#[inline(always)]
fn emit<F: FnMut(CapturedFrame<'_>)>(
    stats: &mut CaptureStats,
    on_frame: &mut F,
    ts_ns: u64,
    data: &[u8],
    orig_len: u32,
    iface: u32,
) {
    stats.frames += 1;
    if (data.len() as u64) < u64::from(orig_len) {
        stats.snap_truncated += 1;
    }
    on_frame(CapturedFrame {
        ts_ns,
        data,
        orig_len,
        iface,
    });
}
