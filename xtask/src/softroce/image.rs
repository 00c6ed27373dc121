//! The VM image: a kernel and an initramfs built from this machine's own files.

use std::collections::HashSet;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};

use super::host::Host;
use crate::util::output_checked;

pub(super) struct Image {
    pub(super) kernel: PathBuf,
    pub(super) initrd: PathBuf,
}

/// Binaries copied into the guest (with the shared libraries ldd finds for them).
const GUEST_BINS: &[&str] = &[
    "/bin/busybox",
    "/usr/bin/ib_write_bw",
    "/usr/bin/ib_read_bw",
    "/usr/bin/ib_send_bw",
    "/usr/bin/ib_write_lat",
    "/usr/bin/ib_read_lat",
    "/usr/bin/ib_send_lat",
    "/usr/bin/rdma",
    "/usr/sbin/ip",
    "/usr/sbin/tc",
    "/usr/bin/tcpdump",
];
/// Shared objects loaded with dlopen (ldd cannot see them), plus libraries a Rust binary
/// copied in later (the observer) usually links.
const GUEST_LIBS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so",
    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/lib/x86_64-linux-gnu/libm.so.6",
];
/// Kernel modules (with their dependencies) put into the image. sch_ingress + cls_bpf are for
/// the observer's TC egress program (clsact qdisc through netlink: 6.1 has no TCX); dummy,
/// cls_matchall and act_mirred for the capture point before netem (pre.pcap); sch_prio and
/// cls_u32 to delay one QP's packets only (a prio band with netem under it, a u32 filter on the
/// BTH destination QP: the steps scenarios' straggler).
const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "9pnet_virtio",
    "9p",
    "crc32_generic",
    "ib_uverbs",
    "rdma_rxe",
    "sch_netem",
    "sch_ingress",
    "cls_bpf",
    "dummy",
    "cls_matchall",
    "act_mirred",
    "sch_prio",
    "cls_u32",
];
const IMAGE_FORMAT: &str = "softroce-image-v2";

/// FNV-1a, 64 bit: a stable fingerprint for the cache key.
fn fnv64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

pub(super) fn build_image(root: &Path, out: &Path, host: &Host, force: bool) -> Result<Image> {
    let init = fs::read(root.join("tests/softroce/guest-init.sh"))
        .context("reading tests/softroce/guest-init.sh")?;
    let key = format!(
        "{IMAGE_FORMAT}\nkernel={}\n{}init={:016x}\nbins={}\nlibs={}\nmodules={}\n",
        host.kernel_release,
        host.versions,
        fnv64(&init),
        GUEST_BINS.join(","),
        GUEST_LIBS.join(","),
        GUEST_MODULES.join(",")
    );
    let dir = out.join("image");
    let initrd = dir.join("initrd.cpio");
    let key_file = dir.join("inputs.txt");
    let vmlinux = dir.join("vmlinux");
    // the uncompressed ELF kernel when we have it (PVH boot), else the bzImage
    let pick = |vmlinux: &Path| Image {
        kernel: if vmlinux.exists() {
            vmlinux.to_path_buf()
        } else {
            host.vmlinuz.clone()
        },
        initrd: initrd.clone(),
    };
    if !force
        && initrd.exists()
        && fs::read_to_string(&key_file).ok().as_deref() == Some(key.as_str())
    {
        println!("softroce: image up to date ({})", initrd.display());
        return Ok(pick(&vmlinux));
    }
    let t = Instant::now();
    fs::create_dir_all(&dir)?;
    let _ = fs::remove_file(&vmlinux);
    match extract_vmlinux(&host.vmlinuz, &vmlinux) {
        Ok(()) => {}
        Err(e) => {
            let _ = fs::remove_file(&vmlinux);
            println!("softroce: booting the bzImage (no PVH vmlinux: {e:#})");
        }
    }
    let staging = dir.join("root");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    fs::create_dir_all(&staging)?;
    merged_usr_root(
        &staging,
        &["etc", "proc", "sys", "dev", "tmp", "run", "share", "root"],
    )?;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut seen = HashSet::new();
    for f in GUEST_BINS.iter().chain(GUEST_LIBS) {
        let p = PathBuf::from(f);
        if !p.exists() {
            bail!("{f} is missing on this machine");
        }
        for dep in std::iter::once(p.clone()).chain(ldd(&p)?) {
            if seen.insert(dep.clone()) {
                files.push(dep);
            }
        }
    }
    for f in &files {
        copy_canonical(f, &staging)?;
    }
    std::os::unix::fs::symlink("busybox", staging.join("usr/bin/sh"))?;
    fs::create_dir_all(staging.join("etc/libibverbs.d"))?;
    fs::copy(
        "/etc/libibverbs.d/rxe.driver",
        staging.join("etc/libibverbs.d/rxe.driver"),
    )?;
    fs::write(
        staging.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\n",
    )?;
    fs::write(staging.join("etc/group"), "root:x:0:\n")?;
    // kernel modules, resolved with modprobe --show-depends, then depmod for the guest
    let mut kos = Vec::new();
    for m in GUEST_MODULES {
        let s = output_checked(Command::new("modprobe").args([
            "-S",
            &host.kernel_release,
            "--show-depends",
            m,
        ]))?;
        for l in s.lines() {
            if let Some(p) = l.strip_prefix("insmod ") {
                let p = p.split_whitespace().next().unwrap_or("").to_string();
                if !kos.contains(&p) {
                    kos.push(p);
                }
            }
        }
    }
    for ko in &kos {
        copy_canonical(Path::new(ko), &staging)?;
    }
    for f in [
        "modules.order",
        "modules.builtin",
        "modules.builtin.modinfo",
    ] {
        let src = host.modules.join(f);
        if src.exists() {
            copy_canonical(&src, &staging)?;
        }
    }
    output_checked(
        Command::new("depmod")
            .arg("-b")
            .arg(&staging)
            .arg(&host.kernel_release),
    )?;
    let init_path = staging.join("init");
    fs::write(&init_path, &init)?;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755))?;

    let tmp = dir.join("initrd.cpio.tmp");
    write_cpio(&staging, &tmp)?;
    fs::rename(&tmp, &initrd)?;
    fs::write(&key_file, &key)?;
    println!(
        "softroce: built image {} ({} files, {} modules, {:.1} MiB) in {:.1}s",
        initrd.display(),
        files.len(),
        kos.len(),
        fs::metadata(&initrd)?.len() as f64 / 1048576.0,
        t.elapsed().as_secs_f64()
    );
    Ok(pick(&vmlinux))
}

/// Decompress the kernel out of Debian's bzImage (XZ payload) into an ELF vmlinux. qemu boots
/// an ELF kernel with a PVH note directly, which skips the real-mode setup and the in-guest XZ
/// decompression: about 5 s less per boot under TCG.
pub(crate) fn extract_vmlinux(vmlinuz: &Path, dest: &Path) -> Result<()> {
    let data = fs::read(vmlinuz)?;
    let magic = b"\xfd7zXZ\x00";
    let off = data
        .windows(magic.len())
        .position(|w| w == magic)
        .ok_or_else(|| anyhow!("no XZ payload in {}", vmlinuz.display()))?;
    let mut child = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(fs::File::create(dest)?)
        .stderr(Stdio::null())
        .spawn()
        .context("running xz")?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("xz stdin"))?;
    let payload = data[off..].to_vec();
    let writer = std::thread::spawn(move || {
        // xz stops reading after the first stream: a broken pipe here is expected
        let _ = stdin.write_all(&payload);
    });
    let st = child.wait()?;
    let _ = writer.join();
    if !st.success() {
        bail!("xz failed ({st})");
    }
    let mut head = [0u8; 4];
    std::io::Read::read_exact(&mut fs::File::open(dest)?, &mut head)?;
    if &head != b"\x7fELF" {
        bail!("decompressed kernel is not an ELF file");
    }
    Ok(())
}

pub(crate) fn ldd(bin: &Path) -> Result<Vec<PathBuf>> {
    let o = Command::new("ldd").arg(bin).output()?;
    // static binaries: "not a dynamic executable", exit code 1
    let s = String::from_utf8_lossy(&o.stdout);
    Ok(s.split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .collect())
}

/// Copy `src` (following symlinks) into `root` at its canonical directory + its own name,
/// so /lib/x86_64-linux-gnu/libc.so.6 lands in usr/lib/x86_64-linux-gnu/libc.so.6.
pub(crate) fn copy_canonical(src: &Path, root: &Path) -> Result<()> {
    let dir = src
        .parent()
        .ok_or_else(|| anyhow!("bad path {}", src.display()))?;
    let dir = fs::canonicalize(dir)?;
    let dest_dir = root.join(dir.strip_prefix("/")?);
    fs::create_dir_all(&dest_dir)?;
    let name = src
        .file_name()
        .ok_or_else(|| anyhow!("bad path {}", src.display()))?;
    let dest = dest_dir.join(name);
    fs::copy(src, &dest).with_context(|| format!("copying {}", src.display()))?;
    Ok(())
}

/// Write the tree under `root` as an uncompressed newc cpio archive (plus /dev/console).
pub(crate) fn write_cpio(root: &Path, dest: &Path) -> Result<()> {
    let mut w = std::io::BufWriter::new(fs::File::create(dest)?);
    let mut ino = 1u32;
    let mut entry = |w: &mut std::io::BufWriter<fs::File>,
                     name: &str,
                     mode: u32,
                     data: &[u8],
                     rdev: (u32, u32)|
     -> Result<()> {
        let namez = name.len() + 1;
        write!(
            w,
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            namez,
            0
        )?;
        ino += 1;
        w.write_all(name.as_bytes())?;
        w.write_all(&[0])?;
        w.write_all(&vec![0u8; (4 - (110 + namez) % 4) % 4])?;
        w.write_all(data)?;
        w.write_all(&vec![0u8; (4 - data.len() % 4) % 4])?;
        Ok(())
    };
    let mut stack = vec![root.to_path_buf()];
    let mut paths = Vec::new();
    while let Some(d) = stack.pop() {
        let mut ents: Vec<_> = fs::read_dir(&d)?.collect::<std::io::Result<Vec<_>>>()?;
        ents.sort_by_key(|e| e.file_name());
        for e in ents {
            let p = e.path();
            let md = fs::symlink_metadata(&p)?;
            paths.push(p.clone());
            if md.is_dir() {
                stack.push(p);
            }
        }
    }
    paths.sort();
    for p in paths {
        let name = p.strip_prefix(root)?.to_string_lossy().into_owned();
        let md = fs::symlink_metadata(&p)?;
        if md.file_type().is_symlink() {
            let t = fs::read_link(&p)?;
            entry(
                &mut w,
                &name,
                0o120777,
                t.as_os_str().as_encoded_bytes(),
                (0, 0),
            )?;
        } else if md.is_dir() {
            entry(&mut w, &name, 0o040755, &[], (0, 0))?;
        } else {
            let data = fs::read(&p)?;
            entry(
                &mut w,
                &name,
                0o100000 | (md.mode() & 0o7777),
                &data,
                (0, 0),
            )?;
        }
    }
    entry(&mut w, "dev/console", 0o020600, &[], (5, 1))?;
    entry(&mut w, "TRAILER!!!", 0, &[], (0, 0))?;
    w.flush()?;
    Ok(())
}

/// A guest root with the host's merged-/usr layout (bin, sbin, lib, lib64 link into usr/, so
/// host binaries and their libraries keep their paths), plus the top-level `dirs`.
pub fn merged_usr_root(staging: &Path, dirs: &[&str]) -> Result<()> {
    for d in ["usr/bin", "usr/sbin", "usr/lib", "usr/lib64"]
        .iter()
        .chain(dirs)
    {
        fs::create_dir_all(staging.join(d))?;
    }
    for d in ["bin", "sbin", "lib", "lib64"] {
        std::os::unix::fs::symlink(format!("usr/{d}"), staging.join(d))?;
    }
    Ok(())
}
