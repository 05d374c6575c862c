//! What each command needs, checked before it spends minutes: programs on `PATH`, root, the
//! provisioned guest, free ports. A missing one is named with the command that installs or
//! provides it. An optional part (test-guest's boot with an RTL accelerator) is skipped with one
//! line saying why, unless `FLDEMU_REQUIRE_VERILATOR` is set (as `.ci/run` does, and as for the
//! RTL test suites), which makes it mandatory.

use std::ffi::OsString;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::child::{self, Echo};
use crate::guest::GuestPaths;

/// The machine as the checks see it; tests build one with a `PATH` of their own.
pub struct Host {
    /// Where programs are looked for (`$PATH`).
    pub path: Option<OsString>,
    /// Running as root (effective user 0).
    pub root: bool,
    /// `FLDEMU_REQUIRE_VERILATOR` is set: the RTL parts are mandatory.
    pub require_verilator: bool,
}

impl Host {
    pub fn current() -> Host {
        Host {
            path: std::env::var_os("PATH"),
            root: effective_uid() == Some(0),
            require_verilator: std::env::var_os("FLDEMU_REQUIRE_VERILATOR").is_some(),
        }
    }

    /// The executable `program` on `PATH`.
    pub fn find(&self, program: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.path.as_ref()?;
        std::env::split_paths(path)
            .map(|d| d.join(program))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    }

    fn has(&self, tool: &Tool) -> bool {
        self.find(tool.program).is_some()
    }

    /// `tool` is here, or xtask can install it (root, with apt-get).
    fn has_or_can_install(&self, tool: &Tool) -> bool {
        self.has(tool) || (self.root && self.has(&APT_GET))
    }
}

/// The effective user ID, from /proc (Linux, like everything the guest needs).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
}

/// A program and the Debian package that installs it.
pub struct Tool {
    pub program: &'static str,
    pub package: &'static str,
}

pub const VERILATOR: Tool = Tool {
    program: "verilator",
    package: "verilator",
};
/// Compiles the Verilated model and links it (Verilator's package does not pull it in).
pub const CXX: Tool = Tool {
    program: "c++",
    package: "g++",
};
/// Runs Verilator's generated makefile.
pub const MAKE: Tool = Tool {
    program: "make",
    package: "make",
};
pub const DEBOOTSTRAP: Tool = Tool {
    program: "debootstrap",
    package: "debootstrap",
};
pub const APT_GET: Tool = Tool {
    program: "apt-get",
    package: "apt",
};
pub const TSHARK: Tool = Tool {
    program: "tshark",
    package: "tshark",
};
pub const VALGRIND: Tool = Tool {
    program: "valgrind",
    package: "valgrind",
};
pub const CALLGRIND_ANNOTATE: Tool = Tool {
    program: "callgrind_annotate",
    package: "valgrind",
};

/// Installs `tool`'s package with apt-get (as root), its output appended to `log`; when the
/// package lists are missing or old, once more after `apt-get update`.
pub fn apt_install(tool: &Tool, log: &Path) -> Result<(), String> {
    eprintln!(
        "xtask: {} not found: installing it (apt-get install {})",
        tool.program, tool.package
    );
    let install = || {
        child::run(
            Command::new("apt-get")
                .args([
                    "install",
                    "-y",
                    "-q",
                    "--no-install-recommends",
                    tool.package,
                ])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            &format!("apt-get install {}", tool.package),
            log,
            Echo::Quiet,
        )
    };
    if install().is_ok() {
        return Ok(());
    }
    child::run(
        Command::new("apt-get").args(["update", "-q"]),
        "apt-get update",
        log,
        Echo::Quiet,
    )?;
    install().map(drop)
}

/// What building an RTL accelerator runs.
pub const RTL_TOOLS: [&Tool; 3] = [&VERILATOR, &CXX, &MAKE];

/// "verilator not found on PATH: install it with `apt-get install verilator`", for one or more.
fn not_found(tools: &[&Tool]) -> String {
    let programs: Vec<&str> = tools.iter().map(|t| t.program).collect();
    let mut packages: Vec<&str> = Vec::new();
    for t in tools {
        if !packages.contains(&t.package) {
            packages.push(t.package);
        }
    }
    format!(
        "{} not found on PATH: install {} with `apt-get install {}`",
        and_list(&programs),
        if tools.len() == 1 { "it" } else { "them" },
        packages.join(" ")
    )
}

fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The problems found for one command; none, and it may start.
#[derive(Default)]
pub struct Checks {
    problems: Vec<String>,
}

impl Checks {
    fn add(&mut self, r: Result<(), String>) {
        if let Err(p) = r {
            self.problems.push(p);
        }
    }

    /// These tools on `PATH`, `why` they are needed.
    fn tools(&mut self, host: &Host, tools: &[&Tool], why: &str) {
        let missing: Vec<&Tool> = tools.iter().copied().filter(|t| !host.has(t)).collect();
        if !missing.is_empty() {
            self.problems
                .push(format!("{why}: {}", not_found(&missing)));
        }
    }

    /// One line per problem, headed by the command; Ok when there is none.
    pub fn finish(self, command: &str) -> Result<(), String> {
        match self.problems.as_slice() {
            [] => Ok(()),
            [one] => Err(format!("{command}: {one}")),
            many => Err(format!(
                "{command} cannot start:\n  - {}",
                many.join("\n  - ")
            )),
        }
    }
}

/// The provisioned guest, for every command that boots it.
pub fn guest_provisioned(paths: &GuestPaths) -> Result<(), String> {
    if paths.ready() {
        Ok(())
    } else if paths.stale() {
        Err(format!(
            "the guest in {} was provisioned by an older recipe: run `cargo xtask guest-setup` \
             to rebuild it (as root; about a minute)",
            paths.cache.display()
        ))
    } else {
        Err(format!(
            "the guest is not provisioned in {}: run `cargo xtask guest-setup` first \
             (as root; about a minute)",
            paths.cache.display()
        ))
    }
}

/// `cargo xtask guest-setup`: nothing once provisioned; the first time root (debootstrap and
/// chroot build the guest root) and debootstrap, which it installs itself when apt-get is there.
pub fn guest_setup(host: &Host, paths: &GuestPaths) -> Result<(), String> {
    let mut checks = Checks::default();
    if !paths.ready() {
        if !host.root {
            checks.problems.push(format!(
                "provisioning the guest needs root (debootstrap and chroot build its root in {}): \
                 run it as root",
                paths.cache.display()
            ));
        }
        if !host.has_or_can_install(&DEBOOTSTRAP) {
            checks.tools(host, &[&DEBOOTSTRAP], "provisioning the guest");
        }
    }
    checks.finish("guest-setup")
}

/// What test-guest does about its boot with an RTL accelerator.
#[derive(Debug, PartialEq, Eq)]
pub enum RtlBoot {
    Run,
    /// Skipped: the line that says why.
    Skip(String),
}

/// test-guest's RTL boot: run when Verilator, a C++ compiler and make are there; otherwise
/// skipped, or, with `FLDEMU_REQUIRE_VERILATOR` set, an error.
pub fn rtl_boot(host: &Host) -> Result<RtlBoot, String> {
    let missing: Vec<&Tool> = RTL_TOOLS.iter().copied().filter(|t| !host.has(t)).collect();
    if missing.is_empty() {
        return Ok(RtlBoot::Run);
    }
    if host.require_verilator {
        Err(format!(
            "boot 4 (RTL accelerator) is required (FLDEMU_REQUIRE_VERILATOR is set), but {}",
            not_found(&missing)
        ))
    } else {
        Ok(RtlBoot::Skip(format!(
            "skipping boot 4 (RTL accelerator): {}",
            not_found(&missing)
        )))
    }
}

/// `cargo xtask test-guest`: the guest, and the RTL boot's tools unless it may be skipped
/// (`rtl`, from [`rtl_boot`]).
pub fn test_guest(rtl: &Result<RtlBoot, String>, paths: &GuestPaths) -> Result<(), String> {
    let mut checks = Checks::default();
    checks.add(rtl.as_ref().map(drop).map_err(String::clone));
    checks.add(guest_provisioned(paths));
    checks.finish("test-guest")
}

/// `cargo xtask guest-run`: the guest, and for an RTL accelerator what builds it.
pub fn guest_run(host: &Host, paths: &GuestPaths, accel: &str) -> Result<(), String> {
    let mut checks = Checks::default();
    if accel.starts_with("rtl:") {
        checks.tools(host, &RTL_TOOLS, &format!("--accel {accel}"));
    }
    checks.add(guest_provisioned(paths));
    checks.finish("guest-run")
}

/// `cargo xtask test-linux-driver`: the guest (its root gets what the build needs itself).
pub fn test_linux_driver(paths: &GuestPaths) -> Result<(), String> {
    let mut checks = Checks::default();
    checks.add(guest_provisioned(paths));
    checks.finish("test-linux-driver")
}

/// `cargo xtask bench-guest`: the guest.
pub fn bench_guest(paths: &GuestPaths) -> Result<(), String> {
    let mut checks = Checks::default();
    checks.add(guest_provisioned(paths));
    checks.finish("bench-guest")
}

/// A port on 127.0.0.1 that a test binds, and who binds it.
pub struct Port {
    pub udp: bool,
    pub number: u16,
    pub user: &'static str,
}

/// Whether `port` can be bound on 127.0.0.1 now.
pub fn port_free(port: &Port) -> Result<(), String> {
    let addr = ("127.0.0.1", port.number);
    let bound = if port.udp {
        UdpSocket::bind(addr).map(drop)
    } else {
        TcpListener::bind(addr).map(drop)
    };
    bound.map_err(|e| {
        let (proto, ss) = if port.udp {
            ("UDP", "-lunp")
        } else {
            ("TCP", "-ltnp")
        };
        format!(
            "{proto} port {n} on 127.0.0.1 ({user}) cannot be bound: {e}; \
             `ss {ss} 'sport = :{n}'` shows what holds it",
            n = port.number,
            user = port.user
        )
    })
}

/// `cargo xtask test-rxe`: the guest; root when the guest root still lacks rdma-core (it is
/// installed into it with chroot); tshark, installed by test-rxe itself as root; its ports.
pub fn test_rxe(
    host: &Host,
    paths: &GuestPaths,
    rdma_installed: bool,
    ports: &[Port],
) -> Result<(), String> {
    let mut checks = Checks::default();
    checks.add(guest_provisioned(paths));
    if paths.ready() && !rdma_installed && !host.root {
        checks.problems.push(
            "the guest root lacks rdma-core, which is installed into it once with chroot: \
             run test-rxe as root"
                .into(),
        );
    }
    if !host.has_or_can_install(&TSHARK) {
        checks.tools(host, &[&TSHARK], "dissecting the capture");
    }
    for p in ports {
        checks.add(port_free(p));
    }
    checks.finish("test-rxe")
}

/// `cargo xtask profile`: valgrind's callgrind and its annotator.
pub fn profile(host: &Host) -> Result<(), String> {
    let mut checks = Checks::default();
    checks.tools(
        host,
        &[&VALGRIND, &CALLGRIND_ANNOTATE],
        "profiling under callgrind",
    );
    checks.finish("profile")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::tests::{scratch, Scratch};

    /// A directory holding an executable stand-in for each of `programs`.
    fn bin_dir(name: &str, programs: &[&str]) -> Scratch {
        use std::os::unix::fs::PermissionsExt;
        let scratch_dir = scratch(name);
        let dir = scratch_dir.path();
        for p in programs {
            let f = dir.join(p);
            std::fs::write(&f, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        scratch_dir
    }

    fn host(bin: &std::path::Path, root: bool, require_verilator: bool) -> Host {
        Host {
            path: Some(bin.as_os_str().to_owned()),
            root,
            require_verilator,
        }
    }

    /// A guest cache in `under` with nothing in it.
    fn unprovisioned(under: &Path) -> GuestPaths {
        GuestPaths::at(under.join("guest"))
    }

    #[test]
    fn programs_are_found_only_on_path_and_only_if_executable() {
        let bin_tmp = bin_dir("find", &["make"]);
        let bin = bin_tmp.path();
        std::fs::write(bin.join("c++"), "not executable").unwrap();
        let h = host(bin, false, false);
        assert_eq!(h.find("make"), Some(bin.join("make")));
        assert_eq!(h.find("c++"), None);
        assert_eq!(h.find("verilator"), None);
    }

    #[test]
    fn without_verilator_the_rtl_boot_is_skipped_with_one_line() {
        let bin_tmp = bin_dir("rtl-skip", &["c++", "make"]);
        let bin = bin_tmp.path();
        assert_eq!(
            rtl_boot(&host(bin, true, false)),
            Ok(RtlBoot::Skip(
                "skipping boot 4 (RTL accelerator): verilator not found on PATH: install it with \
                 `apt-get install verilator`"
                    .into()
            ))
        );
    }

    #[test]
    fn every_missing_rtl_tool_is_named_with_its_package() {
        let bin_tmp = bin_dir("rtl-none", &[]);
        let bin = bin_tmp.path();
        assert_eq!(
            rtl_boot(&host(bin, true, false)),
            Ok(RtlBoot::Skip(
                "skipping boot 4 (RTL accelerator): verilator, c++ and make not found on PATH: \
                 install them with `apt-get install verilator g++ make`"
                    .into()
            ))
        );
    }

    #[test]
    fn with_verilator_required_its_absence_stops_test_guest_up_front() {
        let bin_tmp = bin_dir("rtl-required", &["c++", "make"]);
        let bin = bin_tmp.path();
        let paths = unprovisioned(bin);
        let err = test_guest(&rtl_boot(&host(bin, true, true)), &paths).unwrap_err();
        assert_eq!(
            err,
            format!(
                "test-guest cannot start:\n  \
                 - boot 4 (RTL accelerator) is required (FLDEMU_REQUIRE_VERILATOR is set), but \
                 verilator not found on PATH: install it with `apt-get install verilator`\n  \
                 - the guest is not provisioned in {}: run `cargo xtask guest-setup` first \
                 (as root; about a minute)",
                paths.cache.display()
            )
        );
    }

    #[test]
    fn with_the_rtl_tools_the_rtl_boot_runs() {
        let bin_tmp = bin_dir("rtl-run", &["verilator", "c++", "make"]);
        let bin = bin_tmp.path();
        assert_eq!(rtl_boot(&host(bin, false, true)), Ok(RtlBoot::Run));
    }

    #[test]
    fn guest_setup_names_root_and_debootstrap() {
        let bin_tmp = bin_dir("setup-user", &["apt-get"]);
        let bin = bin_tmp.path();
        let paths = unprovisioned(bin);
        assert_eq!(
            guest_setup(&host(bin, false, false), &paths).unwrap_err(),
            format!(
                "guest-setup cannot start:\n  \
                 - provisioning the guest needs root (debootstrap and chroot build its root in \
                 {}): run it as root\n  \
                 - provisioning the guest: debootstrap not found on PATH: install it with \
                 `apt-get install debootstrap`",
                paths.cache.display()
            )
        );
        // As root with apt-get, guest-setup installs debootstrap itself.
        assert_eq!(guest_setup(&host(bin, true, false), &paths), Ok(()));
        let bare_tmp = bin_dir("setup-bare", &[]);
        let bare = bare_tmp.path();
        assert_eq!(
            guest_setup(&host(bare, true, false), &paths).unwrap_err(),
            "guest-setup: provisioning the guest: debootstrap not found on PATH: install it \
             with `apt-get install debootstrap`"
        );
    }

    #[test]
    fn an_rtl_accelerator_in_guest_run_needs_verilator() {
        let bin_tmp = bin_dir("run-rtl", &["c++"]);
        let bin = bin_tmp.path();
        let paths = unprovisioned(bin);
        let err = guest_run(&host(bin, true, false), &paths, "rtl:designs/mine").unwrap_err();
        assert!(
            err.starts_with(
                "guest-run cannot start:\n  - --accel rtl:designs/mine: verilator and make not \
                 found on PATH: install them with `apt-get install verilator make`\n  - the guest \
                 is not provisioned in "
            ),
            "{err}"
        );
        let err = guest_run(&host(bin, true, false), &paths, "echo").unwrap_err();
        assert!(
            err.starts_with("guest-run: the guest is not provisioned in "),
            "{err}"
        );
    }

    #[test]
    fn a_stale_guest_is_named_as_such() {
        let scratch_dir = scratch("stale");
        let dir = scratch_dir.path();
        let paths = unprovisioned(dir);
        std::fs::create_dir_all(&paths.root).unwrap();
        std::fs::write(paths.root.join(".fldemu-guest"), "an older recipe").unwrap();
        assert_eq!(
            bench_guest(&paths).unwrap_err(),
            format!(
                "bench-guest: the guest in {} was provisioned by an older recipe: run \
                 `cargo xtask guest-setup` to rebuild it (as root; about a minute)",
                paths.cache.display()
            )
        );
    }

    #[test]
    fn a_port_in_use_is_named_with_its_user() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let number = held.local_addr().unwrap().port();
        let err = port_free(&Port {
            udp: false,
            number,
            user: "forwarded to the guest",
        })
        .unwrap_err();
        assert!(
            err.starts_with(&format!(
                "TCP port {number} on 127.0.0.1 (forwarded to the guest) cannot be bound: "
            )),
            "{err}"
        );
        assert!(err.ends_with(&format!(
            "`ss -ltnp 'sport = :{number}'` shows what holds it"
        )));
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let number = udp.local_addr().unwrap().port();
        let port = Port {
            udp: true,
            number,
            user: "fldemu's end of the link",
        };
        assert!(port_free(&port).unwrap_err().starts_with(&format!(
            "UDP port {number} on 127.0.0.1 (fldemu's end of the link)"
        )));
        drop(udp);
        assert_eq!(port_free(&port), Ok(()));
    }

    #[test]
    fn test_rxe_names_root_tshark_and_ports() {
        let bin_tmp = bin_dir("rxe", &["apt-get"]);
        let bin = bin_tmp.path();
        let paths = unprovisioned(bin);
        let held = UdpSocket::bind("127.0.0.1:0").unwrap();
        let number = held.local_addr().unwrap().port();
        let ports = [Port {
            udp: true,
            number,
            user: "the guest's end of the link",
        }];
        let err = test_rxe(&host(bin, false, false), &paths, false, &ports).unwrap_err();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines[0], "test-rxe cannot start:");
        assert!(lines[1].starts_with("  - the guest is not provisioned in "));
        assert_eq!(
            lines[2],
            "  - dissecting the capture: tshark not found on PATH: install it with \
             `apt-get install tshark`"
        );
        assert!(lines[3].starts_with(&format!("  - UDP port {number} on 127.0.0.1")));
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn test_rxe_needs_root_for_rdma_core_in_a_provisioned_guest() {
        let bin_tmp = bin_dir("rxe-root", &["tshark"]);
        let bin = bin_tmp.path();
        let paths = unprovisioned(bin);
        paths.mark_ready_for_tests();
        assert_eq!(
            test_rxe(&host(bin, false, false), &paths, false, &[]).unwrap_err(),
            "test-rxe: the guest root lacks rdma-core, which is installed into it once with \
             chroot: run test-rxe as root"
        );
        assert_eq!(
            test_rxe(&host(bin, false, false), &paths, true, &[]),
            Ok(())
        );
    }

    #[test]
    fn profile_names_valgrind() {
        let bin_tmp = bin_dir("profile", &[]);
        let bin = bin_tmp.path();
        assert_eq!(
            profile(&host(bin, true, false)).unwrap_err(),
            "profile: profiling under callgrind: valgrind and callgrind_annotate not found on \
             PATH: install them with `apt-get install valgrind`"
        );
    }
}
