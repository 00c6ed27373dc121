//! NIC counters, for hosts where RoCE is offloaded to a hardware RDMA NIC and never reaches
//! XDP/TC: the RDMA core's per-port counters (`/sys/class/infiniband/DEV/ports/N/counters` and
//! `hw_counters`: CNPs sent and handled, ECN-marked packets, sequence errors, duplicates,
//! timeouts...) and the netdev's PFC counters from `ethtool -S` (mlx5: rx_prio3_pause, ...).

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use serde::Serialize;

use crate::report::{NicCounter, NicPortSnapshot};

/// Counters of one RDMA port (and its netdev), by name.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PortCounters {
    pub device: String,
    pub port: u32,
    /// The Ethernet netdev the port runs on (RoCE), when the kernel says.
    pub netdev: Option<String>,
    /// `counters/*` and `hw_counters/*`, by file name.
    pub rdma: BTreeMap<String, u64>,
    /// PFC / pause counters from `ethtool -S NETDEV` (names containing "pause").
    pub pause: BTreeMap<String, u64>,
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn read_dir_counters(dir: &Path, into: &mut BTreeMap<String, u64>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // Unreadable or non-numeric files (some drivers expose write-only knobs) are skipped.
        if let (Some(name), Some(v)) = (path.file_name().and_then(|n| n.to_str()), read_u64(&path))
        {
            into.insert(name.to_string(), v);
        }
    }
}

/// Where the kernel lists network interfaces, each with its link `speed`.
pub const NET_SYSFS: &str = "/sys/class/net";

/// The link speed of `iface` in Gb/s from `ROOT/IFACE/speed` (the kernel gives Mb/s), or None
/// when the interface reports none: a link that is down (-1, or a read error), a missing
/// interface, or a virtual one. Only a NIC (`device`) or a bond of NICs (`bonding`) counts: a
/// veth reports a nominal 10 Gb/s that says nothing about a replay's load.
pub fn link_speed_gbps(root: &Path, iface: &str) -> Option<f64> {
    let dir = root.join(iface);
    if !dir.join("device").exists() && !dir.join("bonding").exists() {
        return None;
    }
    let mbps: i64 = fs::read_to_string(root.join(iface).join("speed"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // SPEED_UNKNOWN is -1; 0 would be no link at all.
    (mbps > 0).then(|| mbps as f64 / 1000.0)
}

/// The link speed the watched interfaces share, for loads to be judged against (the engine
/// has one speed): Ok with their common speed, or Err saying why there is none.
pub fn shared_link_speed(root: &Path, ifaces: &[String]) -> Result<f64, String> {
    let speeds: Vec<(&str, Option<f64>)> = ifaces
        .iter()
        .map(|i| (i.as_str(), link_speed_gbps(root, i)))
        .collect();
    if let Some((iface, _)) = speeds.iter().find(|(_, s)| s.is_none()) {
        return Err(format!("{iface} reports no link speed"));
    }
    let first = speeds.first().and_then(|(_, s)| *s).ok_or("no interface")?;
    if speeds.iter().any(|(_, s)| *s != Some(first)) {
        let all: Vec<String> = speeds
            .iter()
            .map(|(i, s)| format!("{i} {} Gb/s", s.unwrap_or(0.0)))
            .collect();
        return Err(format!("the interfaces differ ({})", all.join(", ")));
    }
    Ok(first)
}

/// `ethtool -S` lines `name: value` whose name mentions pause (PFC and 802.3x).
pub fn parse_ethtool_pause(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(':')?;
            let name = name.trim();
            (name.contains("pause")).then_some(())?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

fn ethtool_pause(netdev: &str) -> BTreeMap<String, u64> {
    Command::new("ethtool")
        .args(["-S", netdev])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| parse_ethtool_pause(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default()
}

/// Read every RDMA port under `root` (normally /sys/class/infiniband). `ethtool` adds PFC
/// counters when `with_ethtool` and the tool is installed.
pub fn read_ports(root: &Path, with_ethtool: bool) -> std::io::Result<Vec<PortCounters>> {
    let mut out = Vec::new();
    let mut devices: Vec<PathBuf> = fs::read_dir(root)?.flatten().map(|e| e.path()).collect();
    devices.sort();
    for dev in devices {
        let device = dev
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let Ok(ports) = fs::read_dir(dev.join("ports")) else {
            continue;
        };
        let mut ports: Vec<PathBuf> = ports.flatten().map(|e| e.path()).collect();
        ports.sort();
        for port_dir in ports {
            let Some(port) = port_dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse().ok())
            else {
                continue;
            };
            let mut pc = PortCounters {
                device: device.clone(),
                port,
                netdev: fs::read_to_string(port_dir.join("gid_attrs/ndevs/0"))
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty()),
                ..PortCounters::default()
            };
            read_dir_counters(&port_dir.join("counters"), &mut pc.rdma);
            read_dir_counters(&port_dir.join("hw_counters"), &mut pc.rdma);
            if with_ethtool && let Some(nd) = &pc.netdev {
                pc.pause = ethtool_pause(nd);
            }
            out.push(pc);
        }
    }
    Ok(out)
}

/// `now - before` per counter (counters that went backwards, e.g. after a driver reset, are
/// reported as their new value).
pub fn delta(before: &PortCounters, now: &PortCounters) -> PortCounters {
    let d = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| {
        b.iter()
            .map(|(k, v)| {
                let prev = a.get(k).copied().unwrap_or(0);
                (k.clone(), if *v >= prev { v - prev } else { *v })
            })
            .collect()
    };
    PortCounters {
        device: now.device.clone(),
        port: now.port,
        netdev: now.netdev.clone(),
        rdma: d(&before.rdma, &now.rdma),
        pause: d(&before.pause, &now.pause),
    }
}

/// Which RDMA devices a live run reads (`--rdma-dev NAME|none`; default: every device).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    All,
    Only(String),
    None,
}

impl std::str::FromStr for DeviceChoice {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<DeviceChoice, Self::Err> {
        Ok(match s {
            "none" => DeviceChoice::None,
            "all" | "auto" => DeviceChoice::All,
            name => DeviceChoice::Only(name.to_string()),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NicError {
    #[error(
        "--rdma-dev {name}: no such RDMA device under {root} (devices here: {found}); see `rdma link` \
         or pass --rdma-dev none"
    )]
    NoSuchDevice {
        name: String,
        root: String,
        found: String,
    },
}

/// The NIC counters of a live run: read at every report, turned into changes and rates since
/// the previous read.
pub struct NicWatch {
    root: PathBuf,
    device: Option<String>,
    with_ethtool: bool,
    last: Vec<PortCounters>,
    last_at: std::time::Instant,
}

impl NicWatch {
    /// Start watching the devices under `root` that `choice` names. `Ok(None)` when there is
    /// nothing to watch (no RDMA devices and none asked for, or `none`).
    pub fn start(
        root: &Path,
        choice: &DeviceChoice,
        with_ethtool: bool,
    ) -> Result<Option<NicWatch>, NicError> {
        let device = match choice {
            DeviceChoice::None => return Ok(None),
            DeviceChoice::All => None,
            DeviceChoice::Only(name) => Some(name.clone()),
        };
        let ports = read_ports(root, with_ethtool).unwrap_or_default();
        if let Some(name) = &device
            && !ports.iter().any(|p| &p.device == name)
        {
            let mut found: Vec<&str> = ports.iter().map(|p| p.device.as_str()).collect();
            found.dedup();
            return Err(NicError::NoSuchDevice {
                name: name.clone(),
                root: root.display().to_string(),
                found: if found.is_empty() {
                    "none".into()
                } else {
                    found.join(", ")
                },
            });
        }
        if ports.is_empty() {
            return Ok(None);
        }
        let mut watch = NicWatch {
            root: root.to_path_buf(),
            device,
            with_ethtool,
            last: Vec::new(),
            last_at: std::time::Instant::now(),
        };
        watch.last = watch.read();
        Ok(Some(watch))
    }

    fn read(&self) -> Vec<PortCounters> {
        let mut ports = read_ports(&self.root, self.with_ethtool).unwrap_or_default();
        if let Some(name) = &self.device {
            ports.retain(|p| &p.device == name);
        }
        ports
    }

    /// Read now: every port's totals, changes and rates since the previous read.
    pub fn sample(&mut self) -> Vec<NicPortSnapshot> {
        let now = self.read();
        let at = std::time::Instant::now();
        let secs = at.duration_since(self.last_at).as_secs_f64();
        let out = now
            .iter()
            .map(|p| {
                let before = self
                    .last
                    .iter()
                    .find(|b| (b.device.as_str(), b.port) == (p.device.as_str(), p.port));
                let changed = before.map_or_else(|| p.clone(), |b| delta(b, p));
                let counters = |totals: &BTreeMap<String, u64>, deltas: &BTreeMap<String, u64>| {
                    totals
                        .iter()
                        .map(|(name, total)| {
                            let delta = deltas.get(name).copied().unwrap_or(0);
                            let per_s = if secs > 0.0 { delta as f64 / secs } else { 0.0 };
                            let c = NicCounter {
                                total: *total,
                                delta,
                                per_s,
                            };
                            (name.clone(), c)
                        })
                        .collect()
                };
                NicPortSnapshot {
                    device: p.device.clone(),
                    port: p.port,
                    netdev: p.netdev.clone(),
                    interval_s: secs,
                    rdma: counters(&p.rdma, &changed.rdma),
                    pause: counters(&p.pause, &changed.pause),
                }
            })
            .collect();
        self.last = now;
        self.last_at = at;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_reports_changes_since_the_last_read_for_the_chosen_device() {
        let root = std::env::temp_dir().join(format!("roce-hw-watch-{}", std::process::id()));
        for dev in ["mlx5_0", "mlx5_1"] {
            let port = root.join(dev).join("ports/1/hw_counters");
            fs::create_dir_all(&port).expect("mkdir");
            fs::write(port.join("np_cnp_sent"), "100\n").expect("write");
        }
        let only = DeviceChoice::Only("mlx5_1".into());
        let mut watch = NicWatch::start(&root, &only, false)
            .expect("the device exists")
            .expect("something to watch");
        fs::write(root.join("mlx5_1/ports/1/hw_counters/np_cnp_sent"), "130\n").expect("write");
        fs::write(root.join("mlx5_0/ports/1/hw_counters/np_cnp_sent"), "999\n").expect("write");
        let ports = watch.sample();
        assert_eq!(ports.len(), 1, "only the chosen device");
        assert_eq!(ports[0].device, "mlx5_1");
        let c = &ports[0].rdma["np_cnp_sent"];
        assert_eq!((c.total, c.delta), (130, 30));
        assert!(c.per_s > 0.0);
        let again = watch.sample();
        assert_eq!(again[0].rdma["np_cnp_sent"].delta, 0);
        let all = NicWatch::start(&root, &DeviceChoice::All, false)
            .expect("ok")
            .expect("devices");
        assert_eq!(all.last.len(), 2);
        let err = NicWatch::start(&root, &"mlx5_9".parse().expect("infallible"), false)
            .err()
            .expect("no such device");
        assert!(err.to_string().contains("mlx5_0, mlx5_1"), "{err}");
        assert!(
            NicWatch::start(&root, &DeviceChoice::None, false)
                .expect("ok")
                .is_none()
        );
        let empty = root.join("empty");
        fs::create_dir_all(&empty).expect("mkdir");
        assert!(
            NicWatch::start(&empty, &DeviceChoice::All, false)
                .expect("ok")
                .is_none()
        );
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn link_speed_from_a_sysfs_net_tree() {
        let root = std::env::temp_dir().join(format!("roce-net-{}", std::process::id()));
        for (iface, speed, backed) in [
            ("eth0", "100000\n", "device"),
            ("eth1", "100000", "device"),
            ("eth2", "25000\n", "device"),
            ("bond0", "200000\n", "bonding"),
            ("veth0", "10000\n", ""),
            ("down0", "", "device"),
            ("eth3", "-1\n", "device"),
        ] {
            fs::create_dir_all(root.join(iface).join(backed)).expect("mkdir");
            fs::write(root.join(iface).join("speed"), speed).expect("write");
        }
        assert_eq!(link_speed_gbps(&root, "eth0"), Some(100.0));
        assert_eq!(link_speed_gbps(&root, "eth2"), Some(25.0));
        assert_eq!(link_speed_gbps(&root, "bond0"), Some(200.0));
        // A veth's nominal 10 Gb/s (no device behind it); SPEED_UNKNOWN (-1); a down link's
        // read fails; no such interface.
        assert_eq!(link_speed_gbps(&root, "veth0"), None);
        assert_eq!(link_speed_gbps(&root, "eth3"), None);
        assert_eq!(link_speed_gbps(&root, "down0"), None);
        assert_eq!(link_speed_gbps(&root, "nothere"), None);
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shared_link_speed(&root, &names(&["eth0", "eth1"])),
            Ok(100.0)
        );
        let differ = shared_link_speed(&root, &names(&["eth0", "eth2"])).expect_err("differ");
        assert!(differ.contains("eth0 100 Gb/s, eth2 25 Gb/s"), "{differ}");
        let unknown = shared_link_speed(&root, &names(&["eth0", "veth0"])).expect_err("veth");
        assert_eq!(unknown, "veth0 reports no link speed");
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn reads_a_sysfs_tree_and_computes_deltas() {
        let root = std::env::temp_dir().join(format!("roce-hw-{}", std::process::id()));
        let port = root.join("mlx5_0/ports/1");
        fs::create_dir_all(port.join("hw_counters")).expect("mkdir");
        fs::create_dir_all(port.join("counters")).expect("mkdir");
        fs::create_dir_all(port.join("gid_attrs/ndevs")).expect("mkdir");
        fs::write(port.join("hw_counters/np_cnp_sent"), "12\n").expect("write");
        fs::write(port.join("hw_counters/out_of_sequence"), "3\n").expect("write");
        fs::write(port.join("hw_counters/not_a_number"), "N/A\n").expect("write");
        fs::write(port.join("counters/port_rcv_packets"), "1000\n").expect("write");
        fs::write(port.join("gid_attrs/ndevs/0"), "ens1f0\n").expect("write");
        let first = read_ports(&root, false).expect("read");
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].device, "mlx5_0");
        assert_eq!(first[0].netdev.as_deref(), Some("ens1f0"));
        assert_eq!(first[0].rdma["np_cnp_sent"], 12);
        assert!(!first[0].rdma.contains_key("not_a_number"));
        fs::write(port.join("hw_counters/np_cnp_sent"), "20\n").expect("write");
        let second = read_ports(&root, false).expect("read");
        let d = delta(&first[0], &second[0]);
        assert_eq!(d.rdma["np_cnp_sent"], 8);
        assert_eq!(d.rdma["port_rcv_packets"], 0);
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn ethtool_pause_lines() {
        let text = "NIC statistics:\n     rx_prio3_pause: 42\n     rx_prio3_pause_duration: 1000\n     \
                    tx_bytes: 5\n     tx_pause_storm_warning_events: 1\n";
        let p = parse_ethtool_pause(text);
        assert_eq!(p.len(), 3);
        assert_eq!(p["rx_prio3_pause"], 42);
        assert_eq!(p["tx_pause_storm_warning_events"], 1);
    }
}
