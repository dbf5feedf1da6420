//! Assembles the context switch for the architecture being compiled for, and only that one.
//!
//! The assembly lives in `asm/<arch>.S`; `src/arch` declares the symbols it exports. Any other
//! architecture stops the build here with a message, rather than failing later at link time.
//!
//! It also sets the `greenweave_asan` cfg when the crate is built with AddressSanitizer
//! (`-Zsanitizer=address`, which cargo reports in `CARGO_CFG_SANITIZE`): the switches then tell
//! ASan about every change of stack (`src/arch/asan.rs`). Other builds never see that code.

use std::env;

fn main() {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    let os = env::var("CARGO_CFG_TARGET_OS").expect("cargo sets CARGO_CFG_TARGET_OS");
    let source = match arch.as_str() {
        "x86_64" => "asm/x86_64.S",
        "aarch64" => "asm/aarch64.S",
        other => panic!(
            "greenweave has context-switch assembly for x86_64 and aarch64 only; \
             target architecture `{other}` is not supported (see asm/ for what a port needs)"
        ),
    };
    if os != "linux" {
        panic!(
            "greenweave supports Linux only (its stacks, overflow handler and reactor use \
             Linux interfaces); target OS `{os}` is not supported"
        );
    }
    println!("cargo::rustc-check-cfg=cfg(greenweave_asan)");
    // `--cfg greenweave_chaos` (set by .ci/chaos): the scheduler delays runs at random to
    // shake out tests that rest on timing (src/runtime/chaos.rs).
    println!("cargo::rustc-check-cfg=cfg(greenweave_chaos)");
    // `--cfg greenweave_compact_check` (set by .ci/run for one pass of the suite): every park
    // that may be compacted is, at once, and its released stack faults if touched
    // (`runtime::compaction`).
    println!("cargo::rustc-check-cfg=cfg(greenweave_compact_check)");
    let sanitizers = env::var("CARGO_CFG_SANITIZE").unwrap_or_default();
    if sanitizers
        .split(',')
        .any(|sanitizer| sanitizer == "address")
    {
        println!("cargo::rustc-cfg=greenweave_asan");
    }
    // runtime::dump's stack probe (asm/probe_<arch>.S): a routine whose CFI makes a suspended
    // stack the caller of a function, so std's unwinder walks it.
    let probe = format!("asm/probe_{arch}.S");
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-changed={probe}");
    println!("cargo:rerun-if-changed=build.rs");
    cc::Build::new()
        .file(source)
        .file(&probe)
        .compile("greenweave_switch");
    // The `hooks` feature defines libc's variadic fcntl, ioctl and syscall, which stable Rust
    // cannot, and links every hook through an anchor that refers to them all: the archive is
    // linked whole, since nothing else in a program refers to the hooks (asm/hooks_anchor.S).
    if env::var_os("CARGO_FEATURE_HOOKS").is_some() {
        let hooks = format!("asm/hooks_{arch}.S");
        let anchor = "asm/hooks_anchor.S";
        println!("cargo:rerun-if-changed={hooks}");
        println!("cargo:rerun-if-changed={anchor}");
        cc::Build::new()
            .file(&hooks)
            .file(anchor)
            .link_lib_modifier("+whole-archive")
            .compile("greenweave_hooks");
    }
}
