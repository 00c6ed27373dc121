//! QP owners from the kernel's RDMA resource tracking, over RDMA netlink (what
//! `rdma resource show qp` prints): for every QP on the host's RDMA devices, its local and
//! remote QP numbers, state, SQ/RQ PSNs, port, and the process that created it. A flow whose
//! destination QP is a local QP is traffic into that QP; one whose destination QP is a local
//! QP's remote QP (rqpn) is traffic out of it.
//!
//! Messages (include/uapi/rdma/rdma_netlink.h): a dump of RDMA_NLDEV_CMD_GET lists the devices;
//! a dump of RDMA_NLDEV_CMD_RES_QP_GET per device (it needs the device index) returns
//! RES_QP { RES_QP_ENTRY { LQPN, RQPN, SQ_PSN, RQ_PSN, STATE, PID | KERN_NAME, PORT_INDEX } ... }.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    io,
    os::fd::AsRawFd,
};

pub use crate::report::QpOwner;

/// NETLINK_RDMA, and the RDMA_NL_NLDEV client's message type: (client << 10) | command.
const NETLINK_RDMA: libc::c_int = 20;
const RDMA_NL_NLDEV: u16 = 5;
const CMD_GET: u16 = 1;
const CMD_RES_QP_GET: u16 = 10;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// Attributes (enum rdma_nldev_attr, ABI: fixed numbers).
const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_PORT_INDEX: u16 = 3;
const ATTR_RES_QP: u16 = 19;
const ATTR_RES_QP_ENTRY: u16 = 20;
const ATTR_RES_LQPN: u16 = 21;
const ATTR_RES_RQPN: u16 = 22;
const ATTR_RES_RQ_PSN: u16 = 23;
const ATTR_RES_SQ_PSN: u16 = 24;
const ATTR_RES_STATE: u16 = 27;
const ATTR_RES_PID: u16 = 28;
const ATTR_RES_KERN_NAME: u16 = 29;
/// The nested flag the kernel may set on nested attributes' types.
const NLA_TYPE_MASK: u16 = 0x3fff;

fn state_name(s: u8) -> &'static str {
    match s {
        0 => "RESET",
        1 => "INIT",
        2 => "RTR",
        3 => "RTS",
        4 => "SQD",
        5 => "SQE",
        6 => "ERR",
        _ => "?",
    }
}

/// A netlink request: header, then one u32 attribute when given.
pub fn request(command: u16, seq: u32, dev_index: Option<u32>) -> Vec<u8> {
    let len = 16 + if dev_index.is_some() { 8 } else { 0 };
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&((RDMA_NL_NLDEV << 10) | command).to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    if let Some(i) = dev_index {
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&ATTR_DEV_INDEX.to_ne_bytes());
        m.extend_from_slice(&i.to_ne_bytes());
    }
    m
}

/// Attributes (type, payload) of a netlink attribute stream; stops at the first malformed one.
fn attrs(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16::from_ne_bytes(buf.get(0..2)?.try_into().ok()?));
        let kind = u16::from_ne_bytes(buf.get(2..4)?.try_into().ok()?) & NLA_TYPE_MASK;
        let payload = buf.get(4..len)?;
        buf = buf.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some((kind, payload))
    })
}

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(0..4)?.try_into().ok()?))
}

fn str_of(p: &[u8]) -> String {
    String::from_utf8_lossy(p.split(|b| *b == 0).next().unwrap_or(&[])).into_owned()
}

/// The end of a dump, or what went wrong.
#[derive(Debug, PartialEq, Eq)]
pub enum Part {
    More,
    Done,
    /// NLMSG_ERROR with this errno (positive).
    Error(i32),
}

/// Netlink messages of one `recv`: the payload of each data message to `each`, then whether the
/// dump is done.
pub fn messages(mut buf: &[u8], mut each: impl FnMut(&[u8])) -> Part {
    while buf.len() >= 16 {
        let Some(len) = u32_of(buf).map(|l| l as usize) else {
            break;
        };
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < 16 || len > buf.len() {
            break;
        }
        let payload = &buf[16..len];
        match kind {
            NLMSG_DONE => return Part::Done,
            NLMSG_ERROR => {
                let errno = payload
                    .get(0..4)
                    .map_or(0, |e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
                if errno != 0 {
                    return Part::Error(-errno);
                }
            }
            _ => each(payload),
        }
        buf = buf.get(len.next_multiple_of(4)..).unwrap_or(&[]);
    }
    Part::More
}

/// A device of an RDMA_NLDEV_CMD_GET reply: (index, name).
pub fn parse_device(payload: &[u8]) -> Option<(u32, String)> {
    let mut index = None;
    let mut name = None;
    for (kind, p) in attrs(payload) {
        match kind {
            ATTR_DEV_INDEX => index = u32_of(p),
            ATTR_DEV_NAME => name = Some(str_of(p)),
            _ => {}
        }
    }
    Some((index?, name?))
}

/// The QPs of an RDMA_NLDEV_CMD_RES_QP_GET reply. The kernel names the module of a kernel QP;
/// a process is named by pid only (its `comm` is left empty: [`OwnerBook`] reads it).
pub fn parse_qps(payload: &[u8]) -> Vec<QpOwner> {
    let mut device = String::new();
    let mut out = Vec::new();
    for (kind, p) in attrs(payload) {
        match kind {
            ATTR_DEV_NAME => device = str_of(p),
            ATTR_RES_QP => {
                for (kind, entry) in attrs(p) {
                    if kind != ATTR_RES_QP_ENTRY {
                        continue;
                    }
                    let mut qp = QpOwner::default();
                    let mut lqpn = None;
                    for (kind, v) in attrs(entry) {
                        match kind {
                            ATTR_PORT_INDEX => qp.port = u32_of(v),
                            ATTR_RES_LQPN => lqpn = u32_of(v),
                            ATTR_RES_RQPN => qp.rqpn = u32_of(v),
                            ATTR_RES_SQ_PSN => qp.sq_psn = u32_of(v),
                            ATTR_RES_RQ_PSN => qp.rq_psn = u32_of(v),
                            ATTR_RES_STATE => qp.state = v.first().map(|s| state_name(*s)),
                            ATTR_RES_PID => qp.pid = u32_of(v),
                            ATTR_RES_KERN_NAME => qp.comm = str_of(v),
                            _ => {}
                        }
                    }
                    let Some(lqpn) = lqpn else { continue };
                    qp.lqpn = lqpn;
                    out.push(qp);
                }
            }
            _ => {}
        }
    }
    for qp in &mut out {
        qp.device = device.clone();
    }
    out
}

/// The process name as `ps` shows it (empty if the process is gone).
fn proc_comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

struct Socket(std::os::fd::OwnedFd);

impl Socket {
    fn open() -> io::Result<Socket> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_RDMA,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        Ok(Socket(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }

    /// Send one dump request and hand every reply payload to `each` until the dump is done.
    fn dump(&self, req: &[u8], mut each: impl FnMut(&[u8])) -> io::Result<()> {
        let fd = self.0.as_raw_fd();
        // SAFETY: `req` is a live buffer of `req.len()` bytes; the kernel is the peer (a zeroed
        // sockaddr_nl is pid 0, the kernel).
        let sent = unsafe {
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
            libc::sendto(
                fd,
                req.as_ptr().cast(),
                req.len(),
                0,
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 64 << 10];
        loop {
            // SAFETY: receives into `buf`, a live buffer of `buf.len()` bytes.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            if n == 0 {
                return Ok(());
            }
            match messages(&buf[..n], &mut each) {
                Part::More => {}
                Part::Done => return Ok(()),
                Part::Error(errno) => return Err(io::Error::from_raw_os_error(errno)),
            }
        }
    }
}

/// Every QP on the host's RDMA devices (an empty list on a host without any), processes named
/// by pid only.
pub fn read_owners() -> io::Result<Vec<QpOwner>> {
    let sock = Socket::open()?;
    let mut devices = Vec::new();
    sock.dump(&request(CMD_GET, 1, None), |p| {
        devices.extend(parse_device(p));
    })?;
    let mut out = Vec::new();
    for (seq, (index, _)) in (2u32..).zip(&devices) {
        sock.dump(&request(CMD_RES_QP_GET, seq, Some(*index)), |p| {
            out.extend(parse_qps(p));
        })?;
    }
    Ok(out)
}

/// At most this many destroyed QPs are remembered.
const GONE_KEPT: usize = 4096;

/// The QPs read so far: those alive at the last read and the most recent [`GONE_KEPT`] that
/// were destroyed since (marked `gone`), so the flows of a process that ended (a crashed
/// training job, a perftest run shorter than the report interval) stay labelled with it.
#[derive(Debug)]
pub struct OwnerBook {
    /// Keep this device's QPs only.
    device: Option<String>,
    live: Vec<QpOwner>,
    /// Most recently gone first.
    gone: VecDeque<QpOwner>,
    /// The command of each pid that owns a live QP, read once: a host with thousands of QPs
    /// would otherwise read /proc thousands of times per poll.
    comms: HashMap<u32, String>,
    comm_of: fn(u32) -> String,
}

impl OwnerBook {
    pub fn new(device: Option<String>) -> OwnerBook {
        OwnerBook::naming(device, proc_comm)
    }

    /// A book that names processes with `comm_of` (tests).
    fn naming(device: Option<String>, comm_of: fn(u32) -> String) -> OwnerBook {
        OwnerBook {
            device,
            live: Vec::new(),
            gone: VecDeque::new(),
            comms: HashMap::new(),
            comm_of,
        }
    }

    /// Read the host's QPs now. A host whose RDMA netlink cannot be read (no RDMA core)
    /// simply has no owners: the error is returned and the book stays as it was.
    pub fn refresh(&mut self) -> io::Result<()> {
        self.update(read_owners()?);
        Ok(())
    }

    /// The QPs alive now are `now`: those of the last read that are missing went away.
    pub fn update(&mut self, mut now: Vec<QpOwner>) {
        if let Some(d) = &self.device {
            now.retain(|o| &o.device == d);
        }
        // A pid whose QPs are all gone may name another process next time.
        let pids: HashSet<u32> = now.iter().filter_map(|o| o.pid).collect();
        self.comms.retain(|pid, _| pids.contains(pid));
        for o in &mut now {
            if let Some(pid) = o.pid {
                let comm_of = self.comm_of;
                o.comm = self
                    .comms
                    .entry(pid)
                    .or_insert_with(|| comm_of(pid))
                    .clone();
            }
        }
        let alive: HashSet<(&str, u32)> = now.iter().map(|o| (o.device.as_str(), o.lqpn)).collect();
        // A QP number used again belongs to the new QP.
        self.gone
            .retain(|g| !alive.contains(&(g.device.as_str(), g.lqpn)));
        for mut old in std::mem::take(&mut self.live) {
            if !alive.contains(&(old.device.as_str(), old.lqpn)) {
                old.gone = true;
                self.gone.push_front(old);
            }
        }
        self.gone.truncate(GONE_KEPT);
        self.live = now;
    }

    /// Every QP known: alive first, then gone (most recent first).
    pub fn owners(&self) -> Vec<QpOwner> {
        self.live.iter().chain(&self.gone).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::owners::owner_of;

    fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(payload);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn message(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(payload);
        m
    }

    /// A RES_QP_GET reply as the kernel lays it out: one user QP (perftest) and one kernel QP.
    fn qp_reply() -> Vec<u8> {
        let user = [
            attr(ATTR_PORT_INDEX, &1u32.to_ne_bytes()),
            attr(ATTR_RES_LQPN, &0x11u32.to_ne_bytes()),
            attr(ATTR_RES_RQPN, &0x12u32.to_ne_bytes()),
            attr(ATTR_RES_RQ_PSN, &100u32.to_ne_bytes()),
            attr(ATTR_RES_SQ_PSN, &200u32.to_ne_bytes()),
            attr(ATTR_RES_STATE, &[3]),
            attr(ATTR_RES_PID, &4242u32.to_ne_bytes()),
        ]
        .concat();
        let kernel = [
            attr(ATTR_RES_LQPN, &1u32.to_ne_bytes()),
            attr(ATTR_RES_STATE, &[3]),
            attr(ATTR_RES_KERN_NAME, b"ib_core\0"),
        ]
        .concat();
        // Nested attributes carry NLA_F_NESTED (0x8000) in the kernel's replies.
        let table = [
            attr(ATTR_RES_QP_ENTRY | 0x8000, &user),
            attr(ATTR_RES_QP_ENTRY | 0x8000, &kernel),
        ]
        .concat();
        let payload = [
            attr(ATTR_DEV_INDEX, &0u32.to_ne_bytes()),
            attr(ATTR_DEV_NAME, b"rxe0\0"),
            attr(ATTR_RES_QP | 0x8000, &table),
        ]
        .concat();
        message((RDMA_NL_NLDEV << 10) | CMD_RES_QP_GET, &payload)
    }

    #[test]
    fn a_qp_dump_gives_owners_with_psns_and_processes() {
        let mut reply = qp_reply();
        reply.extend(message(NLMSG_DONE, &[0; 4]));
        let mut owners = Vec::new();
        let end = messages(&reply, |p| owners.extend(parse_qps(p)));
        assert_eq!(end, Part::Done);
        assert_eq!(
            owners[0],
            QpOwner {
                device: "rxe0".into(),
                port: Some(1),
                lqpn: 0x11,
                rqpn: Some(0x12),
                sq_psn: Some(200),
                rq_psn: Some(100),
                state: Some("RTS"),
                pid: Some(4242),
                comm: String::new(),
                gone: false,
            }
        );
        assert_eq!(owners[1].comm, "ib_core");
        assert_eq!((owners[1].pid, owners[1].rqpn), (None, None));
        // Into the local QP 0x11 (ingress), out of it towards 0x12 (egress).
        assert_eq!(
            owner_of(&owners, 0x11, None, "ingress").map(|o| o.lqpn),
            Some(0x11)
        );
        assert_eq!(
            owner_of(&owners, 0x12, None, "egress").map(|o| o.lqpn),
            Some(0x11)
        );
        assert!(owner_of(&owners, 0x12, None, "ingress").is_none());
        assert_eq!(
            owner_of(&owners, 0x12, None, "capture").map(|o| o.lqpn),
            Some(0x11)
        );
    }

    fn qp(lqpn: u32, rqpn: u32, pid: u32) -> QpOwner {
        QpOwner {
            device: "rxe0".into(),
            lqpn,
            rqpn: Some(rqpn),
            pid: Some(pid),
            ..QpOwner::default()
        }
    }

    /// Two local QPs talking to remote QPs of the same number (two peers that number their QPs
    /// alike): the flow's source QP (`peer_qp`) says which one sends; unknown, the first.
    #[test]
    fn egress_flows_pick_the_local_qp_by_their_source_qp() {
        let owners = [qp(0x11, 0x11, 1), qp(0x12, 0x11, 2)];
        let pid = |peer| owner_of(&owners, 0x11, peer, "egress").and_then(|o| o.pid);
        assert_eq!(pid(Some(0x12)), Some(2));
        assert_eq!(pid(Some(0x11)), Some(1));
        assert_eq!(pid(None), Some(1));
        // A source QP that is none of them: no label rather than a wrong one.
        assert_eq!(pid(Some(0x99)), None);
    }

    /// QPs destroyed since the last read stay, marked gone, after the live ones; a QP number
    /// used again belongs to the new QP; a device filter keeps that device only.
    #[test]
    fn the_book_remembers_gone_qps_and_lets_new_ones_win() {
        let mut book = OwnerBook::naming(Some("rxe0".into()), |pid| format!("proc{pid}"));
        let mut other = qp(0x30, 0x31, 9);
        other.device = "mlx5_0".into();
        book.update(vec![qp(0x11, 0x12, 1), qp(0x13, 0x14, 2), other]);
        assert_eq!(book.owners().len(), 2);
        book.update(vec![qp(0x13, 0x14, 2)]);
        let o = book.owners();
        assert_eq!(
            o.iter().map(|o| (o.lqpn, o.gone)).collect::<Vec<_>>(),
            [(0x13, false), (0x11, true)]
        );
        assert_eq!(o[0].comm, "proc2");
        // Gone, its flows still have an owner.
        assert_eq!(
            owner_of(&o, 0x11, None, "ingress").and_then(|o| o.pid),
            Some(1)
        );
        // 0x11 again, another process: the new one, and only once.
        book.update(vec![qp(0x11, 0x15, 3)]);
        let o = book.owners();
        assert_eq!(
            o.iter()
                .map(|o| (o.lqpn, o.pid, o.gone))
                .collect::<Vec<_>>(),
            [(0x11, Some(3), false), (0x13, Some(2), true)]
        );
        for _ in 0..GONE_KEPT + 10 {
            book.update(Vec::new());
        }
        assert_eq!(book.owners().len(), 2);
        let mut many = OwnerBook::naming(None, |_| String::new());
        many.update((0..GONE_KEPT as u32 + 5).map(|n| qp(n, n, n)).collect());
        many.update(Vec::new());
        assert_eq!(many.owners().len(), GONE_KEPT);
    }

    #[test]
    fn device_lists_errors_and_damage() {
        let dev = message(
            (RDMA_NL_NLDEV << 10) | CMD_GET,
            &[
                attr(ATTR_DEV_INDEX, &3u32.to_ne_bytes()),
                attr(ATTR_DEV_NAME, b"mlx5_0\0"),
            ]
            .concat(),
        );
        let mut devices = Vec::new();
        assert_eq!(
            messages(&dev, |p| devices.extend(parse_device(p))),
            Part::More
        );
        assert_eq!(devices, [(3, "mlx5_0".to_string())]);
        // EPERM (-1) in an NLMSG_ERROR.
        let err = message(NLMSG_ERROR, &(-1i32).to_ne_bytes());
        assert_eq!(messages(&err, |_| {}), Part::Error(1));
        // A cut message and a cut attribute are ignored, not read past.
        let reply = qp_reply();
        assert_eq!(
            messages(&reply[..reply.len() - 3], |_| panic!("cut")),
            Part::More
        );
        let mut owners = Vec::new();
        let payload = &reply[16..];
        owners.extend(parse_qps(&payload[..payload.len() - 6]));
        assert!(owners.len() <= 2);
    }

    #[test]
    fn requests_are_dump_requests_for_the_nldev_client() {
        let r = request(CMD_RES_QP_GET, 7, Some(2));
        assert_eq!(r.len(), 24);
        assert_eq!(u32_of(&r), Some(24));
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), (5 << 10) | 10);
        assert_eq!(u16::from_ne_bytes([r[6], r[7]]), NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(
            attrs(&r[16..]).collect::<Vec<_>>(),
            [(ATTR_DEV_INDEX, &2u32.to_ne_bytes()[..])]
        );
    }
}
