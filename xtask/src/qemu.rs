//! The one way the VM tests start a guest: qemu under software emulation (KVM guests hang on
//! these machines), a direct kernel boot with our initramfs, the console to a file and one 9p
//! share for inputs and results, all under a hard `timeout`. The Soft-RoCE and kernel-matrix
//! harnesses add their own devices and kernel arguments.

use std::{
    fs,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::Result;

/// A guest boot, ready for extra devices (`-netdev`, ...) or to be run.
pub struct Guest<'a> {
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    /// Hard limit in seconds; qemu is killed 10 s after it if it ignores SIGTERM.
    pub timeout_secs: u64,
    pub memory_mb: u32,
    /// Appended to the common kernel command line.
    pub kernel_args: &'a str,
    /// Shared with the guest as 9p tag `share`.
    pub share: &'a Path,
    /// Where console.log and qemu.err go.
    pub log_dir: &'a Path,
}

impl Guest<'_> {
    pub fn command(&self) -> Result<Command> {
        let mut cmd = Command::new("timeout");
        cmd.arg("--kill-after=10")
            .arg(self.timeout_secs.to_string())
            .arg("qemu-system-x86_64")
            .args(["-machine", "pc,accel=tcg", "-cpu", "max", "-smp", "1"])
            .args(["-m", &self.memory_mb.to_string()])
            .args(["-nodefaults", "-display", "none", "-no-reboot"])
            .args(["-monitor", "none"])
            .arg("-kernel")
            .arg(self.kernel)
            .arg("-initrd")
            .arg(self.initrd)
            // no_timer_check: under emulation on a loaded host the guest's IO-APIC timer check
            // can miss its ticks and panic the boot ("IO-APIC + timer doesn't work!", seen
            // here while other builds ran); the check proves nothing about the guest we test.
            .arg("-append")
            .arg(format!(
                "console=ttyS0 panic=1 quiet loglevel=4 no_timer_check {}",
                self.kernel_args
            ))
            .arg("-serial")
            .arg(format!(
                "file:{}",
                self.log_dir.join("console.log").display()
            ))
            .arg("-virtfs")
            .arg(format!(
                "local,path={},mount_tag=share,security_model=none,id=fs0",
                self.share.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(self.log_dir.join("qemu.err"))?);
        Ok(cmd)
    }
}
