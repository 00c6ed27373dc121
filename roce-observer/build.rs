//! Builds the eBPF programs (roce-observer-ebpf) for bpfel-unknown-none and puts the object in
//! OUT_DIR, where src/source/kernel.rs embeds it.
//!
//! The eBPF crate needs `-Z build-std=core`, so a toolchain with the `rust-src` component:
//! ROCE_OBSERVER_BPF_TOOLCHAIN if set, else a rustup `nightly` that has rust-src, else the
//! `roce-debian` toolchain that `cargo xtask setup` links to Debian's rustc-web + rust-web-src.
//! Set AYA_BUILD_SKIP=1 to build without the kernel programs (`analyze` still works; `run`
//! then says how to rebuild).
//!
//! The inner build's output (one `cargo:warning` line per line the inner cargo prints, about
//! 140 of them) goes to OUT_DIR/ebpf-build.log and is shown only when that build fails: a
//! successful build stays quiet. Set ROCE_OBSERVER_BPF_VERBOSE=1 to see it anyway.

use std::{
    env, fs,
    io::Write as _,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

const DEBIAN_TOOLCHAIN: &str = "roce-debian";

fn has_rust_src(toolchain: &str) -> bool {
    let Ok(out) = Command::new("rustup")
        .args(["run", toolchain, "rustc", "--print", "sysroot"])
        .output()
    else {
        return false;
    };
    if !out.status.success() {
        return false;
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    sysroot.join("lib/rustlib/src/rust/library/core").is_dir()
}

fn pick_toolchain() -> anyhow::Result<String> {
    if let Ok(name) = env::var("ROCE_OBSERVER_BPF_TOOLCHAIN") {
        return Ok(name);
    }
    for candidate in ["nightly", DEBIAN_TOOLCHAIN] {
        if has_rust_src(candidate) {
            return Ok(candidate.to_string());
        }
    }
    Err(anyhow!(
        "no Rust toolchain with rust-src to build the eBPF programs: run `cargo xtask setup` \
         (installs Debian's rustc-web + rust-web-src and links them as the `{DEBIAN_TOOLCHAIN}` \
         rustup toolchain), or set ROCE_OBSERVER_BPF_TOOLCHAIN, or AYA_BUILD_SKIP=1 to build \
         without the kernel programs"
    ))
}

fn main() -> anyhow::Result<()> {
    println!("cargo:rustc-check-cfg=cfg(ebpf_skipped)");
    println!("cargo:rerun-if-env-changed=ROCE_OBSERVER_BPF_TOOLCHAIN");
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?);
    let root = manifest.parent().context("workspace root")?;
    let ebpf_dir = root.join("roce-observer-ebpf");
    let common_dir = root.join("roce-observer-common");
    println!("cargo:rerun-if-changed={}", common_dir.display());
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        println!("cargo:rustc-cfg=ebpf_skipped");
        println!("cargo:rerun-if-changed={}", ebpf_dir.display());
        return Ok(());
    }
    let toolchain = pick_toolchain()?;
    // The inner cargo needs unstable flags (-Z build-std) from a stable-channel compiler; set
    // for this build script's children only.
    // SAFETY: build scripts are single-threaded at this point.
    unsafe { env::set_var("RUSTC_BOOTSTRAP", "1") };
    let ebpf_dir_str = ebpf_dir.to_str().context("non-UTF-8 path")?;
    let build = || {
        aya_build::build_ebpf(
            [Package {
                name: "roce-observer-ebpf",
                root_dir: ebpf_dir_str,
                ..Default::default()
            }],
            Toolchain::Custom(&toolchain),
        )
    };
    println!("cargo:rerun-if-env-changed=ROCE_OBSERVER_BPF_VERBOSE");
    if env::var("ROCE_OBSERVER_BPF_VERBOSE").is_ok_and(|v| v == "1") {
        return build()
            .with_context(|| format!("building the eBPF programs with toolchain `{toolchain}`"));
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").context("OUT_DIR")?);
    let log = out_dir.join("ebpf-build.log");
    let (result, output) = with_stdout_in(&log, build)?;
    // Directives go to cargo; the inner build's lines (as cargo:warning) only on failure.
    let mut stdout = std::io::stdout().lock();
    for line in output.lines() {
        match line.strip_prefix("cargo:warning=") {
            Some(text) if result.is_err() => eprintln!("{text}"),
            Some(_) => {}
            None => writeln!(stdout, "{line}").context("stdout")?,
        }
    }
    if let Err(err) = result {
        // Said once, plainly, with what to do; not as an error chain with a stack backtrace
        // (cargo shows a build script's stderr when it fails).
        eprintln!(
            "error: building the eBPF programs (roce-observer-ebpf) with toolchain `{toolchain}` \
             failed; its messages are above and in {}.\n\
             What to do: fix the error shown if you changed the kernel programs; if the toolchain \
             itself fails, run `cargo xtask setup` again (or set ROCE_OBSERVER_BPF_TOOLCHAIN); to \
             build without the kernel programs set AYA_BUILD_SKIP=1 (`analyze` and `run \
             --capture` work, `run -i` does not). ROCE_OBSERVER_BPF_VERBOSE=1 shows the build's \
             output as it runs.\n\
             The inner build: {err:#}",
            log.display()
        );
        std::process::exit(1);
    }
    Ok(())
}

/// Run `f` with this process's stdout (fd 1, where aya-build prints) sent to the file at
/// `path`; returns what `f` returned and what it printed.
fn with_stdout_in<T>(path: &Path, f: impl FnOnce() -> T) -> anyhow::Result<(T, String)> {
    let file = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    std::io::stdout().flush().context("stdout")?;
    // SAFETY: dup and dup2 on fds this process owns; fd 1 is restored below on every path
    // (nothing in between returns early or unwinds past the restore: `f` is called inside
    // catch_unwind).
    let saved = unsafe { libc::dup(1) };
    anyhow::ensure!(saved >= 0, "dup(1): {}", std::io::Error::last_os_error());
    // SAFETY: as above.
    if unsafe { libc::dup2(file.as_raw_fd(), 1) } < 0 {
        let err = std::io::Error::last_os_error();
        // SAFETY: `saved` is ours.
        unsafe { libc::close(saved) };
        anyhow::bail!("dup2 to {}: {err}", path.display());
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let _ = std::io::stdout().flush();
    // SAFETY: `saved` is the original fd 1, duplicated above.
    unsafe {
        libc::dup2(saved, 1);
        libc::close(saved);
    }
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    match result {
        Ok(value) => Ok((value, text)),
        Err(panic) => {
            eprintln!("{text}");
            std::panic::resume_unwind(panic)
        }
    }
}
