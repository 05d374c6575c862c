//! The programs xtask starts (cargo, `fldemu`, QEMU, debootstrap and apt-get, valgrind): each
//! one's output goes to a log file, and a child that fails is reported with its exit status and
//! the last lines of that log, headed by the log's full path. The cause a child printed is then
//! on the user's terminal, not only the symptom xtask saw.

use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines of a failed child's log shown beside its exit status.
pub const TAIL_LINES: usize = 20;

/// Where a child's output goes besides its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Echo {
    /// Both streams to this terminal too (builds and demos: their progress is the point).
    Both,
    /// Only its standard error; its standard output is what the caller reads.
    Stderr,
    /// The log only.
    Quiet,
}

/// The last [`TAIL_LINES`] lines of `log`, headed by its full path, indented for a message.
pub fn tail(log: &Path) -> String {
    match std::fs::read(log) {
        Ok(bytes) => tail_of(&log.display().to_string(), &String::from_utf8_lossy(&bytes)),
        Err(e) => format!("  (no log at {}: {e})", log.display()),
    }
}

/// The last [`TAIL_LINES`] lines of `text`, headed by where it comes from.
pub fn tail_of(source: &str, text: &str) -> String {
    // A progress line rewritten with carriage returns shows as its last state.
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .collect();
    if lines.is_empty() {
        return format!("  ({source} is empty)");
    }
    let shown = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    let mut s = format!(
        "  {source} (last {} of {} lines):",
        shown.len(),
        lines.len()
    );
    for l in shown {
        s.push_str("\n  | ");
        s.push_str(l);
    }
    s
}

/// The message for a child that ended badly: what it was, how it ended, and its log's tail.
pub fn failed(what: &str, how: impl Display, log: &Path) -> String {
    format!("{what} {how}\n{}", tail(log))
}

/// Ok when `status` is a success, else the failure message with `log`'s tail.
pub fn check(status: ExitStatus, what: &str, log: &Path) -> Result<(), String> {
    if status.success() {
        Ok(())
    } else {
        Err(failed(what, format!("failed ({status})"), log))
    }
}

/// The message for a child that could not be started at all.
pub fn cannot_start(cmd: &Command, what: &str, e: std::io::Error) -> String {
    let program = cmd.get_program().to_string_lossy();
    if e.kind() == std::io::ErrorKind::NotFound {
        format!("{what}: cannot start {program}: not found ({e})")
    } else {
        format!("{what}: cannot start {program}: {e}")
    }
}

/// `log` opened for appending (created with its directory if missing).
pub fn append(log: &Path) -> Result<File, String> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))
}

/// `dir/NAME.log`, emptied: the log of one step.
pub fn fresh_log(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let log = dir.join(format!("{name}.log"));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    Ok(log)
}

/// A child that ran to its end.
pub struct Ran {
    pub status: ExitStatus,
    /// Its standard output (also in the log).
    pub stdout: String,
    what: String,
    log: PathBuf,
}

impl Ran {
    /// Its standard output if it succeeded, else the failure message.
    pub fn ok(self) -> Result<String, String> {
        check(self.status, &self.what, &self.log)?;
        Ok(self.stdout)
    }

    /// How it ended and its log's tail.
    pub fn failure(&self) -> String {
        failed(&self.what, format!("failed ({})", self.status), &self.log)
    }
}

/// Runs `cmd` to its end, its standard output and error appended line by line to `log` (and
/// copied to this terminal as `echo` says). The two streams stay apart, so that the standard
/// output can be parsed; in the log their lines interleave in the order they are read, which
/// can differ from the order they were written. An error only if it could not be started.
pub fn run_logged(cmd: &mut Command, what: &str, log: &Path, echo: Echo) -> Result<Ran, String> {
    let file = Arc::new(Mutex::new(append(log)?));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| cannot_start(cmd, what, e))?;
    let out = child.stdout.take().map(|s| {
        let file = Arc::clone(&file);
        std::thread::spawn(move || copy_lines(s, &file, (echo == Echo::Both).then(std::io::stdout)))
    });
    let err = child.stderr.take().map(|s| {
        let file = Arc::clone(&file);
        std::thread::spawn(move || {
            copy_lines(s, &file, (echo != Echo::Quiet).then(std::io::stderr))
        })
    });
    let status = child
        .wait()
        .map_err(|e| format!("{what}: waiting for it: {e}"))?;
    let stdout = out
        .map(|t| t.join().unwrap_or_default())
        .unwrap_or_default();
    if let Some(t) = err {
        let _ = t.join();
    }
    Ok(Ran {
        status,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        what: what.to_string(),
        log: log.to_path_buf(),
    })
}

/// [`run_logged`], an unsuccessful exit an error: its standard output, or the failure message.
pub fn run(cmd: &mut Command, what: &str, log: &Path, echo: Echo) -> Result<String, String> {
    run_logged(cmd, what, log, echo)?.ok()
}

/// Copies `from` to the log (and `echo`) a line at a time, so two streams interleave by lines;
/// returns what it read.
fn copy_lines(from: impl Read, log: &Mutex<File>, mut echo: Option<impl Write>) -> Vec<u8> {
    let mut reader = BufReader::new(from);
    let mut all = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if let Ok(mut f) = log.lock() {
            let _ = f.write_all(&line);
        }
        if let Some(w) = echo.as_mut() {
            let _ = w.write_all(&line);
            let _ = w.flush();
        }
        all.extend_from_slice(&line);
    }
    all
}

/// Waits while `child` runs until `ready()` holds. A child that exits first, or a wait longer
/// than `timeout`, is an error naming `what` should have created (`awaited`), the child's exit
/// status and its log's tail; the caller stops a child still running.
pub fn wait_until(
    child: &mut Child,
    what: &str,
    awaited: &str,
    log: &Path,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return Ok(());
        }
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("{what}: waiting for it: {e}"))?
        {
            return Err(failed(
                what,
                format!("exited ({status}) before creating {awaited}"),
                log,
            ));
        }
        if Instant::now() >= deadline {
            return Err(failed(
                what,
                format!(
                    "did not create {awaited} within {} (still running; stopped)",
                    duration(timeout)
                ),
                log,
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `180 s`, or `250 ms` under a second.
pub fn duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh, empty directory for one test, removed when the test ends.
    pub(crate) type Scratch = tempfile::TempDir;

    pub(crate) fn scratch(name: &str) -> Scratch {
        tempfile::Builder::new()
            .prefix(&format!("xtask-test-{name}-"))
            .tempdir()
            .unwrap()
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_failing_child_is_reported_with_its_status_and_last_twenty_lines() {
        let scratch_dir = scratch("failing-child");
        let dir = scratch_dir.path();
        let log = dir.join("step.log");
        let err = run(
            &mut sh(
                "exec >&2; for i in $(seq 1 25); do echo line $i; done; echo cause of it; exit 3",
            ),
            "the step",
            &log,
            Echo::Quiet,
        )
        .unwrap_err();
        let mut expected = format!(
            "the step failed (exit status: 3)\n  {} (last 20 of 26 lines):",
            log.display()
        );
        for i in 7..=25 {
            expected.push_str(&format!("\n  | line {i}"));
        }
        expected.push_str("\n  | cause of it");
        assert_eq!(err, expected);
    }

    #[test]
    fn a_child_killed_by_a_signal_says_so() {
        let scratch_dir = scratch("signalled-child");
        let dir = scratch_dir.path();
        let log = dir.join("step.log");
        let err = run(
            &mut sh("echo dying; kill -9 $$"),
            "the step",
            &log,
            Echo::Quiet,
        )
        .unwrap_err();
        assert!(
            err.starts_with("the step failed (signal: 9 (SIGKILL))\n"),
            "{err}"
        );
        assert!(err.ends_with("\n  | dying"), "{err}");
    }

    #[test]
    fn a_successful_child_returns_its_output_and_leaves_both_streams_in_the_log() {
        let scratch_dir = scratch("good-child");
        let dir = scratch_dir.path();
        let log = dir.join("step.log");
        let out = run(
            &mut sh("echo out; echo err >&2"),
            "the step",
            &log,
            Echo::Quiet,
        )
        .unwrap();
        assert_eq!(out, "out\n");
        let text = std::fs::read_to_string(&log).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort();
        assert_eq!(lines, ["err", "out"]);
    }

    #[test]
    fn a_missing_program_is_named() {
        let scratch_dir = scratch("missing-program");
        let dir = scratch_dir.path();
        let err = run(
            &mut Command::new("fldemu-no-such-program"),
            "the step",
            &dir.join("step.log"),
            Echo::Quiet,
        )
        .unwrap_err();
        assert!(
            err.starts_with("the step: cannot start fldemu-no-such-program: not found ("),
            "{err}"
        );
    }

    #[test]
    fn a_child_that_exits_before_its_files_appear_is_reported_at_once() {
        let scratch_dir = scratch("wait-exits");
        let dir = scratch_dir.path();
        let log = dir.join("serve.log");
        let mut child =
            sh("echo 'Error: running verilator: No such file or directory' >&2; exit 1")
                .stderr(append(&log).unwrap())
                .spawn()
                .unwrap();
        let started = Instant::now();
        let err = wait_until(
            &mut child,
            "fldemu serve",
            "its sockets",
            &log,
            Duration::from_secs(60),
            || false,
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(
            err,
            format!(
                "fldemu serve exited (exit status: 1) before creating its sockets\n  {} (last 1 of 1 lines):\n  | Error: running verilator: No such file or directory",
                log.display()
            )
        );
    }

    #[test]
    fn a_child_that_never_creates_its_files_is_reported_after_the_timeout() {
        let scratch_dir = scratch("wait-timeout");
        let dir = scratch_dir.path();
        let log = dir.join("serve.log");
        let mut child = sh("echo still building; exec sleep 30")
            .stdout(append(&log).unwrap())
            .spawn()
            .unwrap();
        let err = wait_until(
            &mut child,
            "fldemu serve",
            "its sockets",
            &log,
            Duration::from_millis(300),
            || false,
        )
        .unwrap_err();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            err.starts_with(
                "fldemu serve did not create its sockets within 300 ms (still running; stopped)\n"
            ),
            "{err}"
        );
        assert!(err.ends_with("\n  | still building"), "{err}");
    }

    #[test]
    fn an_empty_or_absent_log_says_so() {
        let scratch_dir = scratch("empty-log");
        let dir = scratch_dir.path();
        let log = dir.join("empty.log");
        std::fs::write(&log, "").unwrap();
        assert_eq!(tail(&log), format!("  ({} is empty)", log.display()));
        assert!(tail(&dir.join("absent.log")).starts_with("  (no log at "));
    }
}
