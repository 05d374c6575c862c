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
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        let cache = std::env::var_os("FLDEMU_GUEST_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("fldemu")))
            .or_else(|| std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/fldemu")))
            .unwrap_or_else(|| PathBuf::from("target/fldemu-cache"))
            .join("guest");
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

    fn modules_dir(&self) -> Result<PathBuf> {
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

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what}: {status}"))
    }
}

/// Runs `cmd` with its output appended to `log`; on failure the log's tail is shown.
fn run_logged(cmd: &mut Command, what: &str, log: &Path) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let status = cmd
        .stdout(file)
        .stderr(err)
        .status()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(30).collect();
    for line in tail.iter().rev() {
        eprintln!("  | {line}");
    }
    Err(format!("{what}: {status} (log: {})", log.display()))
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Provisions the guest (idempotent) and returns the QEMU that will run it.
pub fn setup(paths: &GuestPaths) -> Result<Qemu> {
    if paths.ready() {
        say(format!("guest ready in {}", paths.cache.display()));
        return report_qemu(paths);
    }
    std::fs::create_dir_all(&paths.cache).map_err(|e| e.to_string())?;
    let log = paths.cache.join("setup.log");
    let _ = std::fs::remove_file(&log);
    let started = Instant::now();
    if !have("debootstrap") {
        say("installing debootstrap (apt-get)");
        run_logged(
            Command::new("apt-get")
                .args([
                    "install",
                    "-y",
                    "-q",
                    "--no-install-recommends",
                    "debootstrap",
                ])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            "apt-get install debootstrap",
            &log,
        )
        .map_err(|e| format!("{e}; guest-setup needs root (debootstrap, chroot)"))?;
    }
    let partial = paths.cache.join("root.partial");
    let _ = std::fs::remove_dir_all(&partial);
    let mirror = std::env::var("FLDEMU_DEBIAN_MIRROR").unwrap_or_else(|_| MIRROR.into());
    say(format!("debootstrap trixie (minbase) from {mirror}"));
    run_logged(
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
    let in_root = |args: &[&str]| {
        let mut c = Command::new("chroot");
        c.arg(&partial)
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        c
    };
    say("apt-get update (trixie, trixie-backports)");
    run_logged(
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
        run_logged(&mut in_root(&args), what, &log)
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
    run_logged(&mut in_root(&["apt-get", "clean"]), "apt-get clean", &log)?;
    let _ = std::fs::remove_dir_all(&paths.root);
    std::fs::rename(&partial, &paths.root).map_err(|e| e.to_string())?;
    build_initramfs(paths)?;
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

/// Adds the RDMA packages to the provisioned root, once (cached with it).
pub fn setup_rdma(paths: &GuestPaths) -> Result<()> {
    let marker = paths.cache.join("rdma-ready");
    let recipe = RDMA_PACKAGES.join(",");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == recipe) {
        return Ok(());
    }
    if !paths.ready() {
        return Err("the guest is not provisioned: run `cargo xtask guest-setup`".into());
    }
    let log = paths.cache.join("setup-rdma.log");
    let in_root = |args: &[&str]| {
        let mut c = Command::new("chroot");
        c.arg(&paths.root)
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        c
    };
    let started = Instant::now();
    say(format!(
        "installing {} into the guest root",
        RDMA_PACKAGES.join(" ")
    ));
    run_logged(
        &mut in_root(&["apt-get", "update", "-q"]),
        "apt-get update",
        &log,
    )?;
    let mut args = vec!["apt-get", "install", "-y", "-q", "--no-install-recommends"];
    args.extend(RDMA_PACKAGES);
    run_logged(&mut in_root(&args), "install the RDMA packages", &log)?;
    run_logged(&mut in_root(&["apt-get", "clean"]), "apt-get clean", &log)?;
    std::fs::write(&marker, recipe).map_err(|e| e.to_string())?;
    say(format!(
        "RDMA packages installed in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

fn report_qemu(paths: &GuestPaths) -> Result<Qemu> {
    let q = Qemu::find(paths)?;
    say(format!("QEMU: {}", q.describe()));
    Ok(q)
}

/// The busybox initramfs: loads the 9p modules, mounts the root (`rootfs`), the run directory
/// (`run`, at /mnt) and the workspace's release binaries (`work`, at /opt), then switches root
/// and runs /mnt/guest-init.
fn build_initramfs(paths: &GuestPaths) -> Result<()> {
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
        run(
            Command::new(&busybox).arg("xzcat").arg(&src).stdout(out),
            &format!("decompress {}", src.display()),
        )?;
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
    let mut child = Command::new(&busybox)
        .args(["cpio", "-o", "-H", "newc"])
        .current_dir(&staging)
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cpio: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("cpio stdin")?
        .write_all(&list)
        .map_err(|e| e.to_string())?;
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("cpio: {status}"));
    }
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
        if system.has_vfio_user() {
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
        if q.has_vfio_user() {
            Ok(q)
        } else {
            Err("no QEMU with vfio-user-pci: run `cargo xtask guest-setup`".into())
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

    fn has_vfio_user(&self) -> bool {
        self.command()
            .args(["-device", "help"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"vfio-user-pci\""))
    }

    fn describe(&self) -> String {
        if self.prefix.is_empty() {
            format!("system {}", self.program.display())
        } else {
            format!("{} (from the guest root)", self.prefix[2])
        }
    }
}

/// A child process killed and reaped when dropped: no strays on any exit path.
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a guest run produced.
pub struct GuestOutcome {
    /// The command's exit status inside the guest (None: it never finished).
    pub exit_code: Option<i32>,
    /// The command's standard output and error.
    pub output: String,
    pub console_log: PathBuf,
    pub serve_log: PathBuf,
    /// QEMU was killed on purpose (`kill_after`).
    pub killed: bool,
}

impl GuestOutcome {
    /// Prints the last lines of the guest console and of the server's log.
    pub fn show_logs(&self) {
        for (what, path) in [
            ("guest console", &self.console_log),
            ("fldemu serve", &self.serve_log),
        ] {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("---- {what} ({}), last lines ----", path.display());
            for l in &lines[lines.len().saturating_sub(60)..] {
                eprintln!("{l}");
            }
        }
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

const SOCKETS: [&str; 3] = ["nic0.sock", "nic1.sock", "fld.sock"];

impl ServedCard {
    /// Starts the server with `accel` behind FLD; guests boot with `qemu` (from [`setup`]).
    pub fn start(
        paths: GuestPaths,
        qemu: Qemu,
        workspace: &Path,
        accel: &str,
    ) -> Result<ServedCard> {
        if !paths.ready() {
            return Err("the guest is not provisioned: run `cargo xtask guest-setup`".into());
        }
        let release = workspace.join("target/release");
        let fldemu = release.join("fldemu");
        if !fldemu.exists() {
            return Err(format!("{} is missing: build it first", fldemu.display()));
        }
        let dir = workspace.join("target/guest");
        let _ = std::fs::remove_dir_all(&dir);
        let sockets = dir.join("sock");
        std::fs::create_dir_all(&sockets).map_err(|e| e.to_string())?;
        let serve_log = dir.join("serve.log");
        let log = std::fs::File::create(&serve_log).map_err(|e| e.to_string())?;
        let server = Reaped(Some(
            Command::new(&fldemu)
                .args(["serve", "--accel", accel, "--socket-dir"])
                .arg(&sockets)
                .env(
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
                )
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log)
                .spawn()
                .map_err(|e| format!("fldemu serve: {e}"))?,
        ));
        // An RTL accelerator is built with Verilator before the sockets appear (cached after).
        let deadline = Instant::now() + Duration::from_secs(180);
        while !SOCKETS.iter().all(|n| sockets.join(n).exists()) {
            if Instant::now() > deadline {
                return Err("fldemu serve did not create its sockets".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
            .collect();
        boot_vm(
            &self.paths,
            &self.qemu,
            &self.release,
            &run,
            &devices,
            &self.serve_log,
            opts,
        )
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
    let mut guest = Reaped(Some(q.spawn().map_err(|e| format!("QEMU: {e}"))?));
    let child = guest.0.as_mut().expect("spawned");
    let mut command_started: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(s);
        }
        if started.elapsed() > opts.timeout {
            say(format!(
                "guest timed out after {} s",
                opts.timeout.as_secs()
            ));
            break None;
        }
        if command_started.is_none() && share.join("started").exists() {
            command_started = Some(Instant::now());
        }
        if let (Some(t), Some(after)) = (command_started, opts.kill_after) {
            if t.elapsed() >= after {
                say("killing QEMU in the middle of the guest's work");
                killed = true;
                break None;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(guest);
    if let Some(s) = status.filter(|s| !s.success()) {
        say(format!(
            "QEMU exited with {s} (log: {})",
            qemu_log.display()
        ));
    }
    Ok(GuestOutcome {
        exit_code: std::fs::read_to_string(share.join("exit-code"))
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        output: std::fs::read_to_string(share.join("output.log")).unwrap_or_default(),
        console_log,
        serve_log: side_log.to_path_buf(),
        killed,
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
