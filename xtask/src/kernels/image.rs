//! The initramfs around one fetched kernel: busybox, iproute2 (as ip2, see guest-init.sh),
//! tc, tcpreplay, their libraries, the modules the test needs (decompressed: busybox's modprobe
//! reads plain .ko only) and tests/kernels/guest-init.sh as /init. The observer and the
//! fixtures travel in the 9p share, so a new build needs no new image.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};

use super::fetch::Fetched;
use crate::softroce::image::{copy_canonical, extract_vmlinux, ldd, merged_usr_root, write_cpio};
use crate::util::output_checked;

/// Host binaries copied in (with their libraries), and the name each gets in the guest.
const GUEST_BINS: &[(&str, &str)] = &[
    ("/bin/busybox", "usr/bin/busybox"),
    ("/usr/sbin/ip", "usr/sbin/ip2"),
    ("/usr/sbin/tc", "usr/sbin/tc"),
    ("/usr/bin/tcpreplay", "usr/bin/tcpreplay"),
];
/// 9p for the share; veth; clsact (sch_ingress) and cls_bpf for TC egress before TCX.
const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    "veth",
    "sch_ingress",
    "cls_bpf",
];
const IMAGE_FORMAT: &str = "kernels-image-v1";

pub(super) struct Image {
    pub(super) kernel: PathBuf,
    pub(super) initrd: PathBuf,
}

/// What the image is built from: the kernel and the init script.
fn inputs(root: &Path, k: &Fetched) -> Result<(Vec<u8>, String)> {
    let init = fs::read(root.join("tests/kernels/guest-init.sh"))
        .context("reading tests/kernels/guest-init.sh")?;
    let key = format!(
        "{IMAGE_FORMAT}\n{} {}\n{}\n",
        k.release,
        k.version,
        String::from_utf8_lossy(&init)
    );
    Ok((init, key))
}

/// The image in `dir` was built from these inputs.
pub(super) fn up_to_date(root: &Path, dir: &Path, k: &Fetched) -> Result<bool> {
    let (_, key) = inputs(root, k)?;
    Ok(dir.join("initrd.cpio").exists()
        && fs::read_to_string(dir.join("image-inputs.txt"))
            .ok()
            .as_deref()
            == Some(key.as_str()))
}

pub(super) fn build_image(root: &Path, dir: &Path, k: &Fetched) -> Result<Image> {
    let (init, key) = inputs(root, k)?;
    let initrd = dir.join("initrd.cpio");
    let vmlinux = dir.join("vmlinux");
    let key_file = dir.join("image-inputs.txt");
    let pick = || Image {
        kernel: if vmlinux.exists() {
            vmlinux.clone()
        } else {
            k.vmlinuz.clone()
        },
        initrd: initrd.clone(),
    };
    if initrd.exists() && fs::read_to_string(&key_file).ok().as_deref() == Some(key.as_str()) {
        return Ok(pick());
    }
    // An ELF kernel boots through PVH, seconds faster under TCG; the bzImage is the fallback.
    if extract_vmlinux(&k.vmlinuz, &vmlinux).is_err() {
        let _ = fs::remove_file(&vmlinux);
    }
    let staging = dir.join("staging");
    let _ = fs::remove_dir_all(&staging);
    merged_usr_root(&staging, &["proc", "sys", "dev", "tmp", "share"])?;
    for (host, guest) in GUEST_BINS {
        let host = Path::new(host);
        if !host.exists() {
            bail!("{} is missing on this machine", host.display());
        }
        fs::copy(host, staging.join(guest)).with_context(|| host.display().to_string())?;
        for lib in ldd(host)? {
            copy_canonical(&lib, &staging)?;
        }
    }
    std::os::unix::fs::symlink("busybox", staging.join("usr/bin/sh"))?;
    copy_modules(k, &staging)?;
    let init_path = staging.join("init");
    fs::write(&init_path, &init)?;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755))?;
    let tmp = dir.join("initrd.cpio.tmp");
    write_cpio(&staging, &tmp)?;
    fs::rename(&tmp, &initrd)?;
    fs::remove_dir_all(&staging)?;
    fs::write(&key_file, &key)?;
    Ok(pick())
}

/// The modules of GUEST_MODULES with their dependencies, as plain .ko files under the guest's
/// /lib/modules/RELEASE, then depmod for the guest. Built-in ones are skipped.
fn copy_modules(k: &Fetched, staging: &Path) -> Result<()> {
    let src = k.modules_dir();
    // The .deb ships no modules.dep: build one for the unpacked tree first.
    output_checked(
        Command::new("depmod")
            .arg("-b")
            .arg(&k.root)
            .arg(&k.release),
    )?;
    let dest = staging.join("usr/lib/modules").join(&k.release);
    let mut copied = Vec::new();
    for m in GUEST_MODULES {
        let deps = output_checked(Command::new("modprobe").arg("-d").arg(&k.root).args([
            "-S",
            &k.release,
            "--show-depends",
            m,
        ]))
        .with_context(|| format!("module {m} of {}", k.release))?;
        for ko in deps.lines().filter_map(|l| l.strip_prefix("insmod ")) {
            let ko = PathBuf::from(ko.split_whitespace().next().unwrap_or(""));
            if copied.contains(&ko) {
                continue;
            }
            // modprobe prints paths as if the tree were at /: find them in the unpacked one.
            let rel = ko
                .components()
                .skip_while(|c| c.as_os_str() != k.release.as_str())
                .skip(1)
                .collect::<PathBuf>();
            let from = src.join(&rel);
            let name = rel.to_string_lossy().into_owned();
            let to = dest.join(name.trim_end_matches(".xz").trim_end_matches(".zst"));
            fs::create_dir_all(to.parent().ok_or_else(|| anyhow!("bad module path"))?)?;
            if name.ends_with(".xz") {
                let out = fs::File::create(&to)?;
                let st = Command::new("xz")
                    .arg("-dc")
                    .arg(&from)
                    .stdout(out)
                    .status()?;
                if !st.success() {
                    bail!("xz -d {} failed", from.display());
                }
            } else {
                fs::copy(&from, &to).with_context(|| from.display().to_string())?;
            }
            copied.push(ko);
        }
    }
    for f in [
        "modules.order",
        "modules.builtin",
        "modules.builtin.modinfo",
    ] {
        if src.join(f).exists() {
            fs::copy(src.join(f), dest.join(f))?;
        }
    }
    output_checked(
        Command::new("depmod")
            .arg("-b")
            .arg(staging)
            .arg(&k.release),
    )?;
    Ok(())
}
