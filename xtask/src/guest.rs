//! A Linux guest that drives the card like real hardware: QEMU's `vfio-user-pci` attaches every
//! function `fldemu serve` exposes, behind an emulated Intel IOMMU so the guest's vfio-pci can
//! bind them.
//!
//! * `guest-setup` provisions, once, under the cache directory: a Debian trixie root (debootstrap,
//!   minbase) with QEMU from trixie-backports (the first with a vfio-user client), the Debian
//!   kernel, busybox and kmod; and a busybox initramfs that loads the 9p modules, mounts that root
//!   read-only over virtio-9p and switches into it. A system QEMU that already has
//!   `vfio-user-pci` is used instead of the root's.
//! * `guest-run` starts `fldemu serve`, boots the guest (TCG, q35, intel-iommu) with the workspace's
//!   release binaries at /opt, and runs a command there (or gives a shell); then stops both.
//!
//! Nothing is mounted on the host: QEMU from the root runs through the root's own dynamic loader,
//! and the guest reads the root through QEMU's 9p server.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::child::{self, Echo};
use crate::prereq::{self, Host};

/// Bump when the provisioning recipe changes: an older cache is rebuilt.
const RECIPE: &str = "trixie-minbase+backports-qemu;kernel,busybox-static,kmod,pciutils;v1";
const MIRROR: &str = "http://deb.debian.org/debian";
/// Modules the initramfs loads, in order, to mount the root over virtio-9p.
const NINEP_MODULES: [&str; 4] = [
    "fs/netfs/netfs",
    "net/9p/9pnet",
    "net/9p/9pnet_virtio",
    "fs/9p/9p",
];
/// Guest memory: the kernel, the 9p page cache and the driver's pinned DMA buffers.
const GUEST_MEMORY: &str = "1G";

pub type Result<T> = std::result::Result<T, String>;

fn say(msg: impl AsRef<str>) {
    eprintln!("xtask: {}", msg.as_ref());
}

/// Where the provisioned guest lives.
pub struct GuestPaths {
    pub cache: PathBuf,
    pub root: PathBuf,
    pub initrd: PathBuf,
}

impl GuestPaths {
    pub fn new() -> GuestPaths {
        GuestPaths::at(
            std::env::var_os("FLDEMU_GUEST_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("fldemu"))
                })
                .or_else(|| {
                    std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/fldemu"))
                })
                .unwrap_or_else(|| PathBuf::from("target/fldemu-cache"))
                .join("guest"),
        )
    }

    /// A guest cached in `cache`.
    pub fn at(cache: PathBuf) -> GuestPaths {
        GuestPaths {
            root: cache.join("root"),
            initrd: cache.join("initrd.cpio"),
            cache,
        }
    }

    fn marker(&self) -> PathBuf {
        self.root.join(".fldemu-guest")
    }

    pub fn ready(&self) -> bool {
        std::fs::read_to_string(self.marker()).is_ok_and(|s| s.trim() == RECIPE)
            && self.initrd.exists()
    }

    /// Provisioned once, by a recipe other than this one.
    pub fn stale(&self) -> bool {
        !self.ready() && self.marker().exists()
    }

    /// The markers of a provisioned guest, without the guest.
    #[cfg(test)]
    pub fn mark_ready_for_tests(&self) {
        std::fs::create_dir_all(&self.root).unwrap();
        std::fs::write(self.marker(), RECIPE).unwrap();
        std::fs::write(&self.initrd, "").unwrap();
    }

    /// The guest kernel (the newest in the root).
    pub fn kernel(&self) -> Result<PathBuf> {
        let mut kernels: Vec<PathBuf> = std::fs::read_dir(self.root.join("boot"))
            .map_err(|e| format!("{}: {e}", self.root.join("boot").display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
            })
            .collect();
        kernels.sort();
        kernels
            .pop()
            .ok_or_else(|| "no kernel in the guest root".into())
    }

    pub fn modules_dir(&self) -> Result<PathBuf> {
        let kernel = self.kernel()?;
        let version = kernel
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("vmlinuz-"))
            .ok_or("kernel name")?
            .to_string();
        Ok(self.root.join("usr/lib/modules").join(version))
    }

    fn busybox(&self) -> PathBuf {
        self.root.join("usr/bin/busybox")
    }
}

/// Runs a provisioning step, its output appended to the set-up log; a failure shows the log's
/// tail.
fn step(cmd: &mut Command, what: &str, log: &Path) -> Result<()> {
    child::run(cmd, what, log, Echo::Quiet).map(drop)
}

/// Provisions the guest (idempotent) and returns the QEMU that will run it.
pub fn setup(paths: &GuestPaths) -> Result<Qemu> {
    if paths.ready() {
        say(format!("guest ready in {}", paths.cache.display()));
        return report_qemu(paths);
    }
    let host = Host::current();
    prereq::guest_setup(&host, paths)?;
    std::fs::create_dir_all(&paths.cache).map_err(|e| e.to_string())?;
    let log = child::fresh_log(&paths.cache, "setup")?;
    let started = Instant::now();
    if host.find(prereq::DEBOOTSTRAP.program).is_none() {
        prereq::apt_install(&prereq::DEBOOTSTRAP, &log)?;
    }
    let partial = paths.cache.join("root.partial");
    let _ = std::fs::remove_dir_all(&partial);
    let mirror = std::env::var("FLDEMU_DEBIAN_MIRROR").unwrap_or_else(|_| MIRROR.into());
    say(format!("debootstrap trixie (minbase) from {mirror}"));
    step(
        Command::new("debootstrap")
            .args(["--variant=minbase", "trixie"])
            .arg(&partial)
            .arg(&mirror),
        "debootstrap",
        &log,
    )?;
    let sources = format!(
        "Types: deb\nURIs: {mirror}\nSuites: trixie trixie-backports\nComponents: main\n\
         Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    );
    let _ = std::fs::remove_file(partial.join("etc/apt/sources.list"));
    std::fs::write(
        partial.join("etc/apt/sources.list.d/debian.sources"),
        sources,
    )
    .map_err(|e| e.to_string())?;
    let in_root = |args: &[&str]| chroot(&partial, args);
    say("apt-get update (trixie, trixie-backports)");
    step(
        &mut in_root(&["apt-get", "update", "-q"]),
        "apt-get update",
        &log,
    )?;
    let install = |suite: Option<&str>, packages: &[&str], what: &str| {
        let mut args = vec!["apt-get", "install", "-y", "-q", "--no-install-recommends"];
        if let Some(suite) = suite {
            args.extend(["-t", suite]);
        }
        args.extend(packages);
        step(&mut in_root(&args), what, &log)
    };
    say("installing QEMU with vfio-user-pci from trixie-backports");
    install(
        Some("trixie-backports"),
        &["qemu-system-x86"],
        "install QEMU",
    )?;
    say("installing the guest kernel, busybox, kmod, pciutils");
    install(
        None,
        &["linux-image-amd64", "busybox-static", "kmod", "pciutils"],
        "install the guest kernel",
    )?;
    step(&mut in_root(&["apt-get", "clean"]), "apt-get clean", &log)?;
    let _ = std::fs::remove_dir_all(&paths.root);
    std::fs::rename(&partial, &paths.root).map_err(|e| e.to_string())?;
    build_initramfs(paths, &log)?;
    std::fs::write(paths.marker(), RECIPE).map_err(|e| e.to_string())?;
    say(format!(
        "guest provisioned in {:.0} s ({})",
        started.elapsed().as_secs_f64(),
        paths.cache.display()
    ));
    report_qemu(paths)
}

/// What the soft-RoCE interop needs in the guest root: rdma-core's tools and providers
/// (ibv_rc_pingpong, the rxe provider), perftest and iproute2's `rdma`.
const RDMA_PACKAGES: [&str; 5] = [
    "rdma-core",
    "ibverbs-utils",
    "ibverbs-providers",
    "perftest",
    "iproute2",
];

/// Whether the RDMA packages are in the provisioned root.
pub fn rdma_installed(paths: &GuestPaths) -> bool {
    installed(paths, "rdma-ready", &RDMA_PACKAGES)
}

/// Adds the RDMA packages to the provisioned root, once (cached with it).
pub fn setup_rdma(paths: &GuestPaths) -> Result<()> {
    install(paths, "rdma-ready", &RDMA_PACKAGES, "RDMA packages", None)
}

/// What building the kernel module (besides the kernel's headers) and the rdma-core provider
/// (against rdma-core's own source) takes, and the stock tools the test runs on the card.
const DRIVER_BUILD_PACKAGES: [&str; 13] = [
    "gcc",
    "make",
    "libc6-dev",
    "cmake",
    "ninja-build",
    "pkg-config",
    "python3-minimal",
    "libnl-3-dev",
    "libnl-route-3-dev",
    "ethtool",
    "iputils-ping",
    "iperf3",
    "rdmacm-utils",
];

/// The guest kernel's release (`uname -r` in the guest): the root's one modules directory.
pub fn kernel_release(paths: &GuestPaths) -> Result<String> {
    let dir = paths.modules_dir()?;
    dir.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .ok_or_else(|| format!("{}: no kernel release", dir.display()))
}

/// Adds the guest kernel's headers, a compiler and ethtool to the provisioned root, once
/// (cached with it): what `driver/linux/` is built with, in the root, for the guest's kernel.
pub fn setup_driver_build(paths: &GuestPaths) -> Result<String> {
    let release = kernel_release(paths)?;
    let headers = format!("linux-headers-{release}");
    let mut packages = vec![headers.as_str()];
    packages.extend(DRIVER_BUILD_PACKAGES);
    // The root's QEMU came from trixie-backports with its libelf; the headers' kbuild needs
    // libdw of the same version, which only backports has.
    install(
        paths,
        "driver-build-ready",
        &packages,
        "kernel headers and compiler",
        Some("trixie-backports"),
    )?;
    Ok(release)
}

/// Whether `packages` were installed into the root (recorded in `marker`).
fn installed(paths: &GuestPaths, marker: &str, packages: &[&str]) -> bool {
    std::fs::read_to_string(paths.cache.join(marker)).is_ok_and(|m| m == packages.join(","))
}

/// Installs `packages` into the provisioned root once, recorded in `marker`, preferring the
/// `suite` (apt's target release) when given.
fn install(
    paths: &GuestPaths,
    marker: &str,
    packages: &[&str],
    what: &str,
    suite: Option<&str>,
) -> Result<()> {
    if installed(paths, marker, packages) {
        return Ok(());
    }
    prereq::guest_provisioned(paths)?;
    let log = child::fresh_log(&paths.cache, &format!("setup-{marker}"))?;
    let started = Instant::now();
    say(format!(
        "installing {} into the guest root",
        packages.join(" ")
    ));
    step(
        &mut in_root(paths, &["apt-get", "update", "-q"]),
        "apt-get update",
        &log,
    )?;
    let mut args = vec!["apt-get", "install", "-y", "-q", "--no-install-recommends"];
    if let Some(suite) = suite {
        args.extend(["-t", suite]);
    }
    args.extend(packages);
    step(
        &mut in_root(paths, &args),
        &format!("install the {what}"),
        &log,
    )?;
    step(
        &mut in_root(paths, &["apt-get", "clean"]),
        "apt-get clean",
        &log,
    )?;
    std::fs::write(paths.cache.join(marker), packages.join(",")).map_err(|e| e.to_string())?;
    say(format!(
        "{what} installed in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `args` run inside the guest root (chroot), non-interactive.
pub fn in_root(paths: &GuestPaths, args: &[&str]) -> Command {
    chroot(&paths.root, args)
}

/// `args` run inside the root at `root` (chroot), non-interactive.
fn chroot(root: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("chroot");
    c.arg(root)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    c
}

fn report_qemu(paths: &GuestPaths) -> Result<Qemu> {
    let q = Qemu::find(paths)?;
    say(format!("QEMU: {}", q.describe()));
    Ok(q)
}

/// The busybox initramfs: loads the 9p modules, mounts the root (`rootfs`), the run directory
/// (`run`, at /mnt) and the workspace's release binaries (`work`, at /opt), then switches root
/// and runs /mnt/guest-init.
fn build_initramfs(paths: &GuestPaths, log: &Path) -> Result<()> {
    say("building the initramfs");
    let staging = paths.cache.join("initrd.d");
    let _ = std::fs::remove_dir_all(&staging);
    for d in ["bin", "lib/modules"] {
        std::fs::create_dir_all(staging.join(d)).map_err(|e| e.to_string())?;
    }
    let busybox = paths.busybox();
    std::fs::copy(&busybox, staging.join("bin/busybox"))
        .map_err(|e| format!("{}: {e}", busybox.display()))?;
    let modules = paths.modules_dir()?;
    for m in NINEP_MODULES {
        let src = modules.join(format!("kernel/{m}.ko.xz"));
        let name = Path::new(m).file_name().ok_or("module name")?;
        let out =
            std::fs::File::create(staging.join("lib/modules").join(name).with_extension("ko"))
                .map_err(|e| e.to_string())?;
        // Debian ships modules xz-compressed; busybox's insmod wants them plain.
        let what = format!("decompressing {}", src.display());
        let mut xzcat = Command::new(&busybox);
        xzcat
            .arg("xzcat")
            .arg(&src)
            .stdout(out)
            .stderr(child::append(log)?);
        let status = xzcat
            .status()
            .map_err(|e| child::cannot_start(&xzcat, &what, e))?;
        child::check(status, &what, log)?;
    }
    let mods = NINEP_MODULES
        .iter()
        .map(|m| m.rsplit('/').next().unwrap_or(m))
        .collect::<Vec<_>>()
        .join(" ");
    let init = format!(
        "#!/bin/busybox sh\n\
         /bin/busybox --install -s /bin\n\
         mkdir -p /proc /dev /newroot\n\
         mount -t proc proc /proc\n\
         mount -t devtmpfs dev /dev\n\
         for m in {mods}; do insmod /lib/modules/$m.ko || echo \"fldemu-guest: insmod $m failed\"; done\n\
         opts=trans=virtio,version=9p2000.L,msize=262144\n\
         mount -t 9p -o $opts,ro,cache=loose rootfs /newroot || echo 'fldemu-guest: no root'\n\
         mount -t 9p -o $opts run /newroot/mnt || echo 'fldemu-guest: no run directory'\n\
         mount -t 9p -o $opts,ro work /newroot/opt || echo 'fldemu-guest: no workspace binaries'\n\
         mount --move /dev /newroot/dev\n\
         umount /proc\n\
         exec switch_root /newroot /bin/sh /mnt/guest-init\n"
    );
    let init_path = staging.join("init");
    std::fs::write(&init_path, init).map_err(|e| e.to_string())?;
    set_executable(&init_path)?;
    // newc archive of the staging tree, by busybox's cpio.
    let list: Vec<u8> = walk(&staging)?
        .iter()
        .flat_map(|p| {
            let mut l = format!("./{}\n", p.display()).into_bytes();
            if p.as_os_str().is_empty() {
                l = b".\n".to_vec();
            }
            l
        })
        .collect();
    let out = std::fs::File::create(&paths.initrd).map_err(|e| e.to_string())?;
    let what = "packing the initramfs (busybox cpio)";
    let mut cpio = Command::new(&busybox);
    cpio.args(["cpio", "-o", "-H", "newc"])
        .current_dir(&staging)
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(child::append(log)?);
    let mut packer = cpio
        .spawn()
        .map_err(|e| child::cannot_start(&cpio, what, e))?;
    packer
        .stdin
        .take()
        .ok_or("cpio stdin")?
        .write_all(&list)
        .map_err(|e| format!("{what}: {e}"))?;
    let status = packer.wait().map_err(|e| format!("{what}: {e}"))?;
    child::check(status, what, log)?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(())
}

fn set_executable(p: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
}

/// Every path under `dir`, relative to it, parents first.
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = vec![PathBuf::new()];
    let mut i = 0;
    while i < out.len() {
        let abs = dir.join(&out[i]);
        if abs.is_dir() {
            let mut children: Vec<PathBuf> = std::fs::read_dir(&abs)
                .map_err(|e| e.to_string())?
                .flatten()
                .map(|e| out[i].join(e.file_name()))
                .collect();
            children.sort();
            out.extend(children);
        }
        i += 1;
    }
    Ok(out)
}

/// How QEMU is started: a system QEMU with vfio-user-pci, or the root's through its loader.
#[derive(Clone)]
pub struct Qemu {
    program: PathBuf,
    prefix: Vec<String>,
    env: Vec<(String, String)>,
    data_dirs: Vec<PathBuf>,
}

impl Qemu {
    pub fn find(paths: &GuestPaths) -> Result<Qemu> {
        let system = Qemu {
            program: "qemu-system-x86_64".into(),
            prefix: vec![],
            env: vec![],
            data_dirs: vec![],
        };
        // In the cache, or where anyone may write when the cache is someone else's.
        let probe_log = |name: &str| {
            child::fresh_log(&paths.cache, name)
                .or_else(|_| child::fresh_log(&std::env::temp_dir(), &format!("fldemu-{name}")))
        };
        if system
            .probe_vfio_user(&probe_log("qemu-probe-system")?)
            .unwrap_or(false)
        {
            return Ok(system);
        }
        let root = &paths.root;
        let libs = [
            root.join("usr/lib/x86_64-linux-gnu"),
            root.join("lib/x86_64-linux-gnu"),
        ]
        .map(|p| p.display().to_string())
        .join(":");
        let q = Qemu {
            program: root.join("lib64/ld-linux-x86-64.so.2"),
            prefix: vec![
                "--library-path".into(),
                libs,
                root.join("usr/bin/qemu-system-x86_64")
                    .display()
                    .to_string(),
            ],
            env: vec![(
                "QEMU_MODULE_DIR".into(),
                root.join("usr/lib/x86_64-linux-gnu/qemu")
                    .display()
                    .to_string(),
            )],
            data_dirs: vec![root.join("usr/share/qemu"), root.join("usr/share/seabios")],
        };
        match q.probe_vfio_user(&probe_log("qemu-probe")?) {
            Ok(true) => Ok(q),
            Ok(false) => Err(format!(
                "{} has no vfio-user-pci: run `cargo xtask guest-setup` to provision the guest \
                 again",
                q.describe()
            )),
            Err(e) => Err(format!(
                "{e}\n  run `cargo xtask guest-setup` to provision the guest again"
            )),
        }
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.prefix);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        for d in &self.data_dirs {
            c.arg("-L").arg(d);
        }
        c
    }

    /// Whether `-device help` lists vfio-user-pci; an error with QEMU's exit status and its
    /// output's tail (in `log`) if it does not run.
    fn probe_vfio_user(&self, log: &Path) -> Result<bool> {
        let what = format!("`-device help` of {}", self.describe());
        let listed = child::run(
            self.command().args(["-device", "help"]),
            &what,
            log,
            Echo::Quiet,
        )?;
        Ok(listed.contains("\"vfio-user-pci\""))
    }

    fn describe(&self) -> String {
        if self.prefix.is_empty() {
            format!("the system's {}", self.program.display())
        } else {
            format!("the guest root's QEMU ({})", self.prefix[2])
        }
    }
}

/// A child process killed and reaped when dropped: no strays on any exit path.
pub struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// How QEMU's run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QemuEnd {
    /// It exited by itself: the guest powered off (success), or QEMU failed.
    Exited(ExitStatus),
    /// Killed on purpose (`kill_after`).
    Killed,
    /// Killed when the boot's timeout passed.
    TimedOut(Duration),
}

impl std::fmt::Display for QemuEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QemuEnd::Exited(s) if s.success() => write!(f, "QEMU exited (the guest powered off)"),
            QemuEnd::Exited(s) => write!(f, "QEMU failed ({s})"),
            QemuEnd::Killed => write!(f, "QEMU was killed on purpose"),
            QemuEnd::TimedOut(t) => write!(
                f,
                "QEMU was stopped: the guest had not powered off after {}",
                child::duration(*t)
            ),
        }
    }
}

/// What a guest run produced.
pub struct GuestOutcome {
    /// The command's exit status inside the guest (None: it never finished).
    pub exit_code: Option<i32>,
    /// The command's standard output and error.
    pub output: String,
    /// Where the guest wrote them.
    pub output_log: PathBuf,
    pub console_log: PathBuf,
    /// QEMU's own messages.
    pub qemu_log: PathBuf,
    pub qemu_end: QemuEnd,
    /// The log of what the host ran beside the guest (`fldemu serve`, `fldemu rc-pingpong`).
    pub serve_log: PathBuf,
    /// That program's exit during the boot, if it exited.
    pub serve_end: Option<String>,
}

impl GuestOutcome {
    /// QEMU was killed on purpose (`kill_after`).
    pub fn killed(&self) -> bool {
        self.qemu_end == QemuEnd::Killed
    }

    /// How the boot ended (QEMU, the command in the guest, the program beside it) and the last
    /// lines of every log it left, each headed by its full path.
    pub fn report(&self) -> String {
        let command = match self.exit_code {
            Some(code) => format!("the command in the guest exited with {code}"),
            None => "the command in the guest never finished".to_string(),
        };
        let mut report = format!("{}; {command}", self.qemu_end);
        if let Some(end) = &self.serve_end {
            report.push_str("; ");
            report.push_str(end);
        }
        for log in [
            &self.output_log,
            &self.console_log,
            &self.qemu_log,
            &self.serve_log,
        ] {
            report.push('\n');
            report.push_str(&child::tail(log));
        }
        report
    }

    /// Prints [`GuestOutcome::report`].
    pub fn show_logs(&self) {
        eprintln!("{}", self.report());
    }
}

/// Options of one boot.
pub struct RunOptions {
    /// Shell command to run in the guest; None: an interactive shell on this terminal.
    pub command: Option<String>,
    pub timeout: Duration,
    /// Kill QEMU (SIGKILL) this long after the command started in the guest: a client that
    /// vanishes in the middle of its work.
    pub kill_after: Option<Duration>,
    /// Before the command: start this in the background, and three seconds later reset the
    /// machine (`reboot -f`: QEMU resets every device and the firmware enumerates again); the
    /// command runs after the second boot.
    pub reset_during: Option<String>,
}

/// `fldemu serve` (the workspace's release build) with the guest's directories: boots of the
/// guest connect to it one after another, as QEMU processes would.
pub struct ServedCard {
    paths: GuestPaths,
    qemu: Qemu,
    release: PathBuf,
    dir: PathBuf,
    sockets: PathBuf,
    server: Reaped,
    serve_log: PathBuf,
    boots: usize,
}

/// The sockets `fldemu serve` creates: both NIC functions and FLD.
pub const SOCKETS: [&str; 3] = ["nic0.sock", "nic1.sock", "fld.sock"];

/// How long `fldemu serve` may take to create its sockets: an RTL accelerator is built with
/// Verilator first (cached after).
pub const SERVE_START: Duration = Duration::from_secs(180);

/// Starts `fldemu serve` (`serve`, its output to `log`) and waits until it has created
/// [`SOCKETS`] in `sockets`. A server that exits first, or has not created them after `timeout`,
/// is an error with its exit status and its log's tail.
pub fn start_server(
    mut serve: Command,
    what: &str,
    sockets: &Path,
    log: &Path,
    timeout: Duration,
) -> Result<Reaped> {
    let out = child::append(log)?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    serve.stdin(Stdio::null()).stdout(out).stderr(err);
    let mut server = Reaped(Some(
        serve
            .spawn()
            .map_err(|e| child::cannot_start(&serve, what, e))?,
    ));
    let process = server.0.as_mut().expect("spawned");
    child::wait_until(process, what, "its sockets", log, timeout, || {
        SOCKETS.iter().all(|n| sockets.join(n).exists())
    })?;
    Ok(server)
}

impl ServedCard {
    /// Starts the server with `accel` behind FLD; guests boot with `qemu` (from [`setup`]).
    pub fn start(
        paths: GuestPaths,
        qemu: Qemu,
        workspace: &Path,
        accel: &str,
    ) -> Result<ServedCard> {
        Self::start_with(paths, qemu, workspace, accel, &[])
    }

    /// [`ServedCard::start`] with more arguments for `fldemu serve` (an `--uplink`, say).
    pub fn start_with(
        paths: GuestPaths,
        qemu: Qemu,
        workspace: &Path,
        accel: &str,
        serve_args: &[String],
    ) -> Result<ServedCard> {
        prereq::guest_provisioned(&paths)?;
        let release = workspace.join("target/release");
        let fldemu = release.join("fldemu");
        if !fldemu.exists() {
            return Err(format!("{} is missing: build it first", fldemu.display()));
        }
        let dir = workspace.join("target/guest");
        let _ = std::fs::remove_dir_all(&dir);
        let sockets = dir.join("sock");
        std::fs::create_dir_all(&sockets).map_err(|e| e.to_string())?;
        let serve_log = child::fresh_log(&dir, "serve")?;
        let mut serve = Command::new(&fldemu);
        serve
            .args(["serve", "--accel", accel, "--socket-dir"])
            .arg(&sockets)
            .args(serve_args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            );
        let server = start_server(
            serve,
            &format!("fldemu serve --accel {accel}"),
            &sockets,
            &serve_log,
            SERVE_START,
        )?;
        Ok(ServedCard {
            paths,
            qemu,
            release,
            dir,
            sockets,
            server,
            serve_log,
            boots: 0,
        })
    }

    /// Whether the server process is still running.
    pub fn server_alive(&mut self) -> bool {
        self.server
            .0
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Boots the guest with every function attached, runs the command (or a shell), and waits
    /// until the guest powers off, the timeout passes, or `kill_after` ends it.
    pub fn boot(&mut self, opts: &RunOptions) -> Result<GuestOutcome> {
        self.boot_with(opts, &[])
    }

    /// [`ServedCard::boot`] with more QEMU arguments (a NIC on the card's uplink, say).
    pub fn boot_with(&mut self, opts: &RunOptions, qemu_args: &[String]) -> Result<GuestOutcome> {
        self.boots += 1;
        let run = self.dir.join(format!("boot{}", self.boots));
        let devices: Vec<String> = SOCKETS
            .iter()
            .flat_map(|n| {
                [
                    "-device".to_string(),
                    format!(
                        "{{\"driver\":\"vfio-user-pci\",\"socket\":{{\"path\":\"{}\",\"type\":\"unix\"}}}}",
                        self.sockets.join(n).display()
                    ),
                ]
            })
            .chain(qemu_args.iter().cloned())
            .collect();
        let mut outcome = boot_vm(
            &self.paths,
            &self.qemu,
            &self.release,
            &run,
            &devices,
            &self.serve_log,
            opts,
        )?;
        if let Some(Ok(Some(status))) = self.server.0.as_mut().map(Child::try_wait) {
            outcome.serve_end = Some(format!("fldemu serve has exited ({status})"));
        }
        Ok(outcome)
    }
}

/// Boots the guest with `devices` (QEMU arguments), runs the command (or a shell), and waits
/// until the guest powers off, the timeout passes, or `kill_after` ends it. `run` is the boot's
/// directory; `side_log` the log of whatever the host runs beside the guest.
pub fn boot_vm(
    paths: &GuestPaths,
    qemu: &Qemu,
    release: &Path,
    run: &Path,
    devices: &[String],
    side_log: &Path,
    opts: &RunOptions,
) -> Result<GuestOutcome> {
    let share = run.join("share");
    std::fs::create_dir_all(&share).map_err(|e| e.to_string())?;
    let console_log = run.join("console.log");
    let qemu_log = run.join("qemu.log");
    let guest_init = match &opts.command {
        Some(cmd) => format!(
            "mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t tmpfs tmp /tmp\n\
                 export PATH=/opt:/usr/sbin:/usr/bin:/sbin:/bin RUST_LOG=${{RUST_LOG:-warn}}\n\
                 {reset}\
                 echo fldemu-guest: running\n\
                 : > /mnt/started\n\
                 ( {cmd} ) > /mnt/output.log 2>&1\n\
                 echo $? > /mnt/exit-code\n\
                 busybox poweroff -f\n",
            reset = opts
                .reset_during
                .as_ref()
                .map_or(String::new(), |bg| format!(
                    "if [ ! -e /mnt/reset-done ]; then\n\
                     : > /mnt/reset-done\n\
                     ( {bg} ) > /mnt/before-reset.log 2>&1 &\n\
                     sleep 3\n\
                     echo fldemu-guest: resetting the machine\n\
                     busybox reboot -f\n\
                     fi\n"
                )),
        ),
        None => "mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t tmpfs tmp /tmp\n\
                     export PATH=/opt:/usr/sbin:/usr/bin:/sbin:/bin\n\
                     echo 'fldemu guest: the card is at' $(lspci -n -d fff0: | cut -d' ' -f1)\n\
                     echo 'try: fldemu demo --transport vfio --accel echo; exit powers off'\n\
                     busybox setsid -c /bin/sh -l\n\
                     busybox poweroff -f\n"
            .to_string(),
    };
    std::fs::write(share.join("guest-init"), guest_init).map_err(|e| e.to_string())?;

    let kernel = paths.kernel()?;
    let mut q = qemu.command();
    q.args([
        "-accel",
        "tcg",
        "-machine",
        "q35,memory-backend=mem",
        "-m",
        GUEST_MEMORY,
    ])
    .args([
        "-object",
        &format!("memory-backend-memfd,id=mem,size={GUEST_MEMORY},share=on"),
    ])
    .args(["-smp", "1", "-nodefaults", "-display", "none"])
    // A reboot ends the run, unless the run is about a reset.
    .args(opts.reset_during.is_none().then_some("-no-reboot"))
    .args(["-device", "intel-iommu,intremap=on,caching-mode=on"])
    .arg("-kernel")
    .arg(&kernel)
    .arg("-initrd")
    .arg(&paths.initrd)
    .args([
        "-append",
        "console=ttyS0 intel_iommu=on quiet panic=-1 hugepages=64",
    ]);
    for (tag, path, ro) in [
        ("rootfs", &paths.root, true),
        ("run", &share, false),
        ("work", &release.to_path_buf(), true),
    ] {
        q.arg("-virtfs").arg(format!(
            "local,path={},mount_tag={tag},security_model=none{}",
            path.display(),
            if ro { ",readonly=on" } else { "" }
        ));
    }
    q.args(devices);
    q.stderr(std::fs::File::create(&qemu_log).map_err(|e| e.to_string())?);
    if opts.command.is_none() {
        // The guest's console is this terminal (Ctrl-A X leaves QEMU).
        q.args(["-serial", "mon:stdio"]);
    } else {
        q.arg("-serial")
            .arg(format!("file:{}", console_log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
    }
    let started = Instant::now();
    let mut guest = Reaped(Some(
        q.spawn().map_err(|e| child::cannot_start(&q, "QEMU", e))?,
    ));
    let child = guest.0.as_mut().expect("spawned");
    let mut command_started: Option<Instant> = None;
    let qemu_end = loop {
        if let Some(s) = child
            .try_wait()
            .map_err(|e| format!("QEMU: waiting for it: {e}"))?
        {
            break QemuEnd::Exited(s);
        }
        if started.elapsed() > opts.timeout {
            say(format!(
                "guest timed out after {}",
                child::duration(opts.timeout)
            ));
            break QemuEnd::TimedOut(opts.timeout);
        }
        if command_started.is_none() && share.join("started").exists() {
            command_started = Some(Instant::now());
        }
        if let (Some(t), Some(after)) = (command_started, opts.kill_after) {
            if t.elapsed() >= after {
                say("killing QEMU in the middle of the guest's work");
                break QemuEnd::Killed;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(guest);
    if let QemuEnd::Exited(s) = &qemu_end {
        if !s.success() {
            say(child::failed("QEMU", format!("failed ({s})"), &qemu_log));
        }
    }
    let output_log = share.join("output.log");
    Ok(GuestOutcome {
        exit_code: std::fs::read_to_string(share.join("exit-code"))
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        output: std::fs::read_to_string(&output_log).unwrap_or_default(),
        output_log,
        console_log,
        qemu_log,
        qemu_end,
        serve_log: side_log.to_path_buf(),
        serve_end: None,
    })
}

impl Drop for ServedCard {
    fn drop(&mut self) {
        // The server goes first, then its sockets: nothing is left behind.
        drop(self.server.0.take().map(|c| Reaped(Some(c))));
        let _ = std::fs::remove_dir_all(&self.sockets);
    }
}

/// Starts a server, boots the guest once with `opts`, and stops everything.
pub fn run_guest(
    paths: GuestPaths,
    qemu: Qemu,
    workspace: &Path,
    accel: &str,
    opts: &RunOptions,
) -> Result<GuestOutcome> {
    let mut served = ServedCard::start(paths, qemu, workspace, accel)?;
    served.boot(opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::tests::scratch;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_server_that_exits_at_once_is_reported_with_its_status_and_log() {
        let scratch_dir = scratch("serve-exits");
        let dir = scratch_dir.path();
        let log = dir.join("serve.log");
        let started = Instant::now();
        let err = start_server(
            sh("echo 'building device/rtl/examples/echo'; \
                echo 'Error: running verilator: No such file or directory (is Verilator \
                installed? Debian: apt-get install verilator)' >&2; exit 1"),
            "fldemu serve --accel rtl:device/rtl/examples/echo",
            dir,
            &log,
            SERVE_START,
        )
        .err()
        .expect("the server exited");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(
            err,
            format!(
                "fldemu serve --accel rtl:device/rtl/examples/echo exited (exit status: 1) \
                 before creating its sockets\n  {} (last 2 of 2 lines):\n  \
                 | building device/rtl/examples/echo\n  \
                 | Error: running verilator: No such file or directory (is Verilator installed? \
                 Debian: apt-get install verilator)",
                log.display()
            )
        );
    }

    #[test]
    fn a_server_is_ready_once_its_sockets_exist() {
        let scratch_dir = scratch("serve-ready");
        let dir = scratch_dir.path();
        let log = dir.join("serve.log");
        let script = format!(
            "cd '{}' && touch nic0.sock nic1.sock fld.sock && exec sleep 30",
            dir.display()
        );
        let server = start_server(sh(&script), "fldemu serve", dir, &log, SERVE_START);
        assert!(server.is_ok(), "{:?}", server.err());
    }

    #[test]
    fn a_qemu_that_fails_at_once_is_reported_with_its_status_and_every_log() {
        let scratch_dir = scratch("qemu-fails");
        let dir = scratch_dir.path();
        let paths = GuestPaths::at(dir.join("guest"));
        std::fs::create_dir_all(paths.root.join("boot")).unwrap();
        std::fs::write(paths.root.join("boot/vmlinuz-6.12.0-test"), "").unwrap();
        let qemu = Qemu {
            program: "sh".into(),
            prefix: vec![
                "-c".into(),
                "echo 'qemu-system-x86_64: -device vfio-user-pci: Connection refused' >&2; \
                 exit 1"
                    .into(),
                "qemu-system-x86_64".into(),
            ],
            env: vec![],
            data_dirs: vec![],
        };
        let serve_log = dir.join("serve.log");
        std::fs::write(&serve_log, "fldemu serve: listening\n").unwrap();
        let run = dir.join("boot1");
        let outcome = boot_vm(
            &paths,
            &qemu,
            dir,
            &run,
            &[],
            &serve_log,
            &RunOptions {
                command: Some("true".into()),
                timeout: Duration::from_secs(60),
                kill_after: None,
                reset_during: None,
            },
        )
        .unwrap();
        assert!(!outcome.killed());
        assert_eq!(outcome.exit_code, None);
        let qemu_log = run.join("qemu.log");
        assert_eq!(
            outcome.report(),
            format!(
                "QEMU failed (exit status: 1); the command in the guest never finished\n  \
                 (no log at {}: No such file or directory (os error 2))\n  \
                 (no log at {}: No such file or directory (os error 2))\n  \
                 {} (last 1 of 1 lines):\n  \
                 | qemu-system-x86_64: -device vfio-user-pci: Connection refused\n  \
                 {} (last 1 of 1 lines):\n  | fldemu serve: listening",
                run.join("share/output.log").display(),
                run.join("console.log").display(),
                qemu_log.display(),
                serve_log.display()
            )
        );
    }
}
