//! `cargo xtask <command>`: project automation that needs more than one cargo invocation.
//!
//! * `ci`     — what `.ci/run` does: the test suites, then the demo and a short benchmark.
//! * `demo`   — the main job: `fldemu demo` in release mode (extra arguments are passed on).
//! * `bench`  — `fldemu bench --json` in release mode (extra arguments are passed on).
//!
//! Guest provisioning (`guest-setup`, `guest-run`, `test-guest`) arrives with the vfio-user
//! server.

use std::process::{Command, ExitCode};

fn cargo(args: &[&str]) -> bool {
    eprintln!("xtask: cargo {}", args.join(" "));
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn fldemu(args: &[&str]) -> bool {
    let mut all = vec![
        "run",
        "--quiet",
        "--release",
        "-p",
        "fld-qemu",
        "--bin",
        "fldemu",
        "--",
    ];
    all.extend_from_slice(args);
    cargo(&all)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let ok = match args.first().map(String::as_str) {
        Some("ci") => {
            cargo(&["test", "--workspace"])
                && fldemu(&["demo", "--accel", "echo", "--packets", "50000", "--json"])
                && fldemu(&["demo", "--packets", "50000", "--json"])
                && fldemu(&["memory", "--json"])
                && fldemu(&["model", "--packets", "5000", "--json"])
                && fldemu(&[
                    "demo",
                    "--packets",
                    "8941",
                    "--size",
                    "60",
                    "--size-max",
                    "9000",
                    "--rx-mode",
                    "regular",
                    "--json",
                ])
                && fldemu(&["bench", "--json", "--packets", "100000"])
        }
        Some("demo") => fldemu(&[&["demo"], rest.as_slice()].concat()),
        Some("bench") => fldemu(&[&["bench", "--json"], rest.as_slice()].concat()),
        _ => {
            eprintln!("usage: cargo xtask <ci|demo|bench> [args...]");
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
