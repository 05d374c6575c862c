//! Each xtask command run as a user would, on a machine without what it needs: a missing
//! prerequisite is named up front with the command that installs it, and a child that fails at
//! once is reported with its exit status and its log's last lines. Nothing here builds, boots or
//! downloads anything; every run ends within seconds.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Held by every test: a stand-in program written while another test's child is being forked
/// could not be run ("text file busy").
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A fresh, empty directory for one test, removed when the test ends.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("xtask-commands-{name}-"))
        .tempdir()
        .unwrap()
}

/// `dir/name`, an executable shell script with `body`.
fn program(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// What one run of `cargo xtask` left.
struct Run {
    success: bool,
    stderr: String,
}

/// Runs xtask with `args`, its `PATH` being `path`, its guest in `cache` (a directory called
/// `guest`, as xtask names it under `FLDEMU_GUEST_CACHE`) and its logs beside it in `logs`,
/// plus `env`.
fn xtask(args: &[&str], path: &Path, cache: &Path, env: &[(&str, OsString)]) -> Run {
    let started = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(args)
        .env("PATH", path)
        .env(
            "FLDEMU_GUEST_CACHE",
            cache.parent().expect("the cache's parent"),
        )
        .env("FLDEMU_XTASK_LOGS", cache.with_file_name("logs"))
        .env_remove("FLDEMU_REQUIRE_VERILATOR")
        .env_remove("FLDEMU_DEBIAN_MIRROR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("xtask runs");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "xtask {args:?} took {:?}",
        started.elapsed()
    );
    Run {
        success: out.status.success(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn unprovisioned(cache: &Path) -> String {
    format!(
        "the guest is not provisioned in {}: run `cargo xtask guest-setup` first (as root; about \
         a minute)",
        cache.display()
    )
}

#[test]
fn test_guest_without_verilator_skips_the_rtl_boot_with_one_line() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("test-guest-skip");
    let dir = scratch_dir.path();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    program(&bin, "c++", "exit 0");
    program(&bin, "make", "exit 0");
    let cache = dir.join("guest");
    let run = xtask(&["test-guest"], &bin, &cache, &[]);
    assert!(!run.success);
    assert_eq!(
        run.stderr,
        format!(
            "xtask: skipping boot 4 (RTL accelerator): verilator not found on PATH: install it \
             with `apt-get install verilator`\nxtask: test-guest: {}\n",
            unprovisioned(&cache)
        )
    );
}

#[test]
fn test_guest_with_verilator_required_fails_up_front_naming_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("test-guest-required");
    let dir = scratch_dir.path();
    let cache = dir.join("guest");
    let run = xtask(
        &["test-guest"],
        dir,
        &cache,
        &[("FLDEMU_REQUIRE_VERILATOR", "1".into())],
    );
    assert!(!run.success);
    assert_eq!(
        run.stderr,
        format!(
            "xtask: test-guest cannot start:\n  - boot 4 (RTL accelerator) is required \
             (FLDEMU_REQUIRE_VERILATOR is set), but verilator, c++ and make not found on PATH: \
             install them with `apt-get install verilator g++ make`\n  - {}\n",
            unprovisioned(&cache)
        )
    );
}

#[test]
fn guest_setup_reports_a_failing_debootstrap_with_its_last_lines() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("guest-setup");
    let dir = scratch_dir.path();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    program(
        &bin,
        "debootstrap",
        "exec >&2\n\
         echo 'I: Retrieving InRelease'\n\
         echo 'E: Failed getting release file http://deb.debian.org/debian/dists/trixie/Release'\n\
         exit 1",
    );
    let cache = dir.join("guest");
    let run = xtask(&["guest-setup"], &bin, &cache, &[]);
    assert!(!run.success);
    if is_root() {
        assert_eq!(
            run.stderr,
            format!(
                "xtask: debootstrap trixie (minbase) from http://deb.debian.org/debian\n\
                 xtask: debootstrap failed (exit status: 1)\n  {} (last 2 of 2 lines):\n  \
                 | I: Retrieving InRelease\n  \
                 | E: Failed getting release file \
                 http://deb.debian.org/debian/dists/trixie/Release\n",
                cache.join("setup.log").display()
            )
        );
    } else {
        assert_eq!(
            run.stderr,
            format!(
                "xtask: guest-setup: provisioning the guest needs root (debootstrap and chroot \
                 build its root in {}): run it as root\n",
                cache.display()
            )
        );
    }
}

#[test]
fn guest_setup_without_debootstrap_or_apt_get_names_debootstrap() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        return;
    }
    let scratch_dir = scratch("guest-setup-bare");
    let dir = scratch_dir.path();
    let cache = dir.join("guest");
    let run = xtask(&["guest-setup"], dir, &cache, &[]);
    assert!(!run.success);
    assert_eq!(
        run.stderr,
        "xtask: guest-setup: provisioning the guest: debootstrap not found on PATH: install it \
         with `apt-get install debootstrap`\n"
    );
}

#[test]
fn guest_run_with_an_rtl_accelerator_names_verilator_and_the_guest() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("guest-run");
    let dir = scratch_dir.path();
    let cache = dir.join("guest");
    let run = xtask(
        &[
            "guest-run",
            "--accel",
            "rtl:device/rtl/examples/echo",
            "--",
            "true",
        ],
        dir,
        &cache,
        &[],
    );
    assert!(!run.success);
    assert_eq!(
        run.stderr,
        format!(
            "xtask: guest-run cannot start:\n  - --accel rtl:device/rtl/examples/echo: \
             verilator, c++ and make not found on PATH: install them with `apt-get install \
             verilator g++ make`\n  - {}\n",
            unprovisioned(&cache)
        )
    );
}

#[test]
fn bench_guest_names_the_missing_guest() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("bench-guest");
    let dir = scratch_dir.path();
    let cache = dir.join("guest");
    let run = xtask(&["bench-guest"], dir, &cache, &[]);
    assert!(!run.success);
    assert_eq!(
        run.stderr,
        format!("xtask: bench-guest: {}\n", unprovisioned(&cache))
    );
}

#[test]
fn test_rxe_names_the_guest_and_tshark_before_building() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("test-rxe");
    let dir = scratch_dir.path();
    let cache = dir.join("guest");
    let run = xtask(&["test-rxe"], dir, &cache, &[]);
    assert!(!run.success);
    let expected = format!(
        "xtask: test-rxe cannot start:\n  - {}\n  - dissecting the capture: tshark not found on \
         PATH: install it with `apt-get install tshark`\n",
        unprovisioned(&cache)
    );
    // A port of test-rxe's held by something else on this machine adds a line.
    assert!(run.stderr.starts_with(&expected), "{}", run.stderr);
}

#[test]
fn profile_names_valgrind_before_building() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("profile");
    let dir = scratch_dir.path();
    let run = xtask(&["profile"], dir, &dir.join("guest"), &[]);
    assert!(!run.success);
    assert_eq!(
        run.stderr,
        "xtask: profile: profiling under callgrind: valgrind and callgrind_annotate not found on \
         PATH: install them with `apt-get install valgrind`\n"
    );
}

/// A cargo that fails as a compile error does: 25 lines of progress, the error, exit 101.
fn failing_cargo(dir: &Path) -> PathBuf {
    program(
        dir,
        "cargo",
        "echo \"fake cargo $*\" >&2\n\
         i=1; while [ $i -le 24 ]; do echo \"   Compiling crate$i v0.1.0\" >&2; i=$((i+1)); done\n\
         echo 'error: could not compile `fld-qemu` (bin \"fldemu\") due to 1 previous error' >&2\n\
         exit 101",
    )
}

/// The report of [`failing_cargo`] run as `cargo ARGS` with its log in `log`.
fn cargo_failure(args: &str, log: &Path) -> String {
    let mut s = format!(
        "xtask: cargo {args} failed (exit status: 101)\n  {} (last 20 of 26 lines):\n",
        log.display()
    );
    for i in 6..=24 {
        s.push_str(&format!("  |    Compiling crate{i} v0.1.0\n"));
    }
    s.push_str(
        "  | error: could not compile `fld-qemu` (bin \"fldemu\") due to 1 previous error\n",
    );
    s
}

#[test]
fn ci_reports_a_failing_cargo_with_its_last_lines() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("ci");
    let dir = scratch_dir.path();
    let cargo = failing_cargo(dir);
    let run = xtask(&["ci"], dir, &dir.join("guest"), &[("CARGO", cargo.into())]);
    assert!(!run.success);
    assert!(
        run.stderr
            .starts_with("xtask: cargo test --workspace\nfake cargo test --workspace\n"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.ends_with(&cargo_failure(
            "test --workspace",
            &dir.join("logs/cargo-test.log")
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn demo_and_bench_report_a_failing_cargo_with_its_last_lines() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch_dir = scratch("demo");
    let dir = scratch_dir.path();
    let cargo = failing_cargo(dir);
    for (command, args) in [
        (
            vec!["demo", "--packets", "5"],
            "run --quiet --release -p fld-qemu --bin fldemu -- demo --packets 5",
        ),
        (
            vec!["bench"],
            "run --quiet --release -p fld-qemu --bin fldemu -- bench --json",
        ),
    ] {
        let run = xtask(
            &command,
            dir,
            &dir.join("guest"),
            &[("CARGO", cargo.clone().into())],
        );
        assert!(!run.success);
        assert!(
            run.stderr
                .ends_with(&cargo_failure(args, &dir.join("logs/cargo-run.log"))),
            "{}",
            run.stderr
        );
    }
}
