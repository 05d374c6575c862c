//! Building a design: Verilator, then one shared object per design, cached by content hash.
//!
//! A design is named by a Verilator file list (`files.f`, read with `-F`, so its paths are
//! relative to it) or by the directory that holds one; the list names the sources and, with
//! `--top-module`, the top. Verilator's own generated makefile compiles the model (it knows its
//! flags and runtime); the shim and Verilator's runtime are then linked into `libfldrtl.so`.
//! The `cc` crate was not used: it builds what is known when fldemu is compiled, and a design
//! is only known when a user names it.
//!
//! The cache key hashes the shim, the contract header, `verilator --version`, whether tracing
//! is compiled in, the file list, and every file it names plus the HDL files in the include
//! directories it names. The cache lives in `$FLDEMU_RTL_CACHE`, else
//! `$XDG_CACHE_HOME/fldemu/rtl`, else `~/.cache/fldemu/rtl`; a build happens in a private
//! directory renamed into place, so concurrent builds of one design are safe.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Why a design could not be built or loaded.
#[derive(Debug, thiserror::Error)]
pub enum RtlError {
    #[error("{0}: no Verilator file list (a directory needs a files.f)")]
    NoFileList(PathBuf),
    #[error("reading {0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    #[error("running {0}: {1} (is Verilator installed? Debian: apt-get install verilator)")]
    Tool(&'static str, #[source] std::io::Error),
    #[error("{step} failed:\n{log}")]
    Failed { step: &'static str, log: String },
    #[error("loading {0}: {1}")]
    Load(PathBuf, #[source] libloading::Error),
    #[error("{0}: built for shim ABI {1}, this fldemu speaks {2}")]
    Abi(PathBuf, u32, u32),
    #[error("{0} was built without waveform support")]
    NoTrace(PathBuf),
}

/// A built design: the shared object to load.
#[derive(Clone, Debug)]
pub struct RtlDesign {
    pub library: PathBuf,
    /// The file list it was built from.
    pub file_list: PathBuf,
    /// Waveform dumping compiled in (`--trace`).
    pub trace: bool,
    /// Whether this call built it (false: found in the cache).
    pub built: bool,
}

/// The file list a design argument names: the file itself, or `files.f` in a directory.
pub fn file_list(spec: &Path) -> Result<PathBuf, RtlError> {
    let f = if spec.is_dir() {
        spec.join("files.f")
    } else {
        spec.to_path_buf()
    };
    if f.is_file() {
        Ok(f)
    } else {
        Err(RtlError::NoFileList(spec.to_path_buf()))
    }
}

/// Starts a design in `dir` (created; it must not exist or be empty): the template top module
/// as `NAME.v` with the module called `name`, and the file list `files.f` naming it.
pub fn scaffold(dir: &Path, name: &str) -> Result<(), RtlError> {
    let identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| RtlError::Io(p, e)
    };
    if !identifier {
        return Err(RtlError::Io(
            dir.join(name),
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a Verilog identifier"),
        ));
    }
    if dir.exists() && std::fs::read_dir(dir).map_err(io(dir))?.next().is_some() {
        return Err(RtlError::Io(
            dir.to_path_buf(),
            std::io::Error::new(std::io::ErrorKind::AlreadyExists, "exists and is not empty"),
        ));
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let top = crate::TEMPLATE.replacen("module fld_accel_template", &format!("module {name}"), 1);
    let v = dir.join(format!("{name}.v"));
    std::fs::write(&v, top).map_err(io(&v))?;
    let list = dir.join("files.f");
    let text = format!(
        "// Verilator file list: paths relative to this file.\n--top-module {name}\n{name}.v\n"
    );
    std::fs::write(&list, text).map_err(io(&list))
}

/// The cache root (see the module comment).
pub fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("FLDEMU_RTL_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("fldemu/rtl");
    }
    if let Some(d) = std::env::var_os("HOME") {
        return PathBuf::from(d).join(".cache/fldemu/rtl");
    }
    std::env::temp_dir().join("fldemu-rtl")
}

fn read(p: &Path) -> Result<Vec<u8>, RtlError> {
    std::fs::read(p).map_err(|e| RtlError::Io(p.to_path_buf(), e))
}

/// The words of a Verilator file list, comments (`//`, `#`) removed.
fn list_words(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split_whitespace())
        .map(str::to_owned)
        .collect()
}

fn is_hdl(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("v" | "sv" | "vh" | "svh" | "vlt")
    )
}

/// Sources that decide the build: the files the list names and the HDL files of its include
/// directories, in a stable order.
fn design_inputs(list: &Path) -> Result<Vec<PathBuf>, RtlError> {
    let base = list.parent().unwrap_or(Path::new("."));
    let text = String::from_utf8_lossy(&read(list)?).into_owned();
    let words = list_words(&text);
    let mut files = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let dir = if let Some(d) = w.strip_prefix("+incdir+") {
            Some(d.to_owned())
        } else if w == "-I" || w == "-y" {
            i += 1;
            words.get(i).cloned()
        } else {
            w.strip_prefix("-I").map(str::to_owned)
        };
        if let Some(d) = dir {
            let d = base.join(d);
            if let Ok(rd) = std::fs::read_dir(&d) {
                let mut inc: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file() && is_hdl(p))
                    .collect();
                inc.sort();
                files.extend(inc);
            }
        } else if !w.starts_with('-') && !w.starts_with('+') {
            let p = base.join(w);
            if p.is_file() {
                files.push(p);
            }
        }
        i += 1;
    }
    Ok(files)
}

/// Whether Verilator can be run here.
pub fn verilator_available() -> bool {
    Command::new("verilator")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// For test suites that need Verilator: true when it is installed; otherwise says the test is
/// skipped and returns false, unless `FLDEMU_REQUIRE_VERILATOR` is set (CI sets it), which makes
/// a missing Verilator a failure.
pub fn verilator_for_tests() -> bool {
    if verilator_available() {
        return true;
    }
    assert!(
        std::env::var_os("FLDEMU_REQUIRE_VERILATOR").is_none(),
        "Verilator is required (FLDEMU_REQUIRE_VERILATOR) but not installed"
    );
    eprintln!("skipped: Verilator is not installed (Debian: apt-get install verilator)");
    false
}

fn verilator_version() -> Result<String, RtlError> {
    let out = Command::new("verilator")
        .arg("--version")
        .output()
        .map_err(|e| RtlError::Tool("verilator", e))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn verilator_root() -> Result<PathBuf, RtlError> {
    let out = Command::new("verilator")
        .args(["--getenv", "VERILATOR_ROOT"])
        .output()
        .map_err(|e| RtlError::Tool("verilator", e))?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The design's cache key.
fn design_key(list: &Path, trace: bool, version: &str) -> Result<String, RtlError> {
    let mut h = Sha256::new();
    h.update(b"fldemu-rtl\0");
    h.update(crate::SHIM);
    h.update(crate::HEADER);
    h.update(version);
    h.update([trace as u8]);
    h.update(read(list)?);
    for f in design_inputs(list)? {
        h.update(f.file_name().map(|n| n.as_encoded_bytes()).unwrap_or(b""));
        h.update(read(&f)?);
    }
    Ok(hex(&h.finalize())[..24].to_owned())
}

/// Runs `cmd`, returning its combined output as the error when it fails. Verilator's warnings
/// (lint of the user's design) are shown even when it succeeds.
fn run(step: &'static str, cmd: &mut Command) -> Result<(), RtlError> {
    log::debug!("{step}: {cmd:?}");
    let out = cmd.output().map_err(|e| RtlError::Tool(step, e))?;
    if out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        for w in text.lines().filter(|l| l.starts_with("%Warning")) {
            eprintln!("{step}: {w}");
        }
        return Ok(());
    }
    let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
    log.push_str(&String::from_utf8_lossy(&out.stderr));
    // The end of a compiler's output says what went wrong.
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(60)..].join("\n");
    Err(RtlError::Failed { step, log: tail })
}

/// A private directory under `root` for one build.
fn scratch_dir(root: &Path, key: &str) -> Result<PathBuf, RtlError> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = root.join(format!(".{key}.{}.{n}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| RtlError::Io(d.clone(), e))?;
    Ok(d)
}

/// Verilator's runtime (verilated.cpp and friends) compiled position-independent, once per
/// Verilator version and trace setting: the part of every build that does not depend on the
/// design, and the slowest to compile.
fn runtime_objects(
    root: &Path,
    vroot: &Path,
    version: &str,
    trace: bool,
) -> Result<Vec<PathBuf>, RtlError> {
    let mut h = Sha256::new();
    h.update(version);
    h.update([trace as u8]);
    let key = format!("runtime-{}", &hex(&h.finalize())[..16]);
    let mut sources = vec!["verilated.cpp", "verilated_threads.cpp"];
    if trace {
        sources.push("verilated_vcd_c.cpp");
    }
    let dir = root.join(&key);
    let objects: Vec<PathBuf> = sources
        .iter()
        .map(|s| dir.join(s.replace(".cpp", ".o")))
        .collect();
    if objects.iter().all(|o| o.is_file()) {
        return Ok(objects);
    }
    let tmp = scratch_dir(root, &key)?;
    for s in &sources {
        run(
            "compiling Verilator's runtime",
            cxx(vroot, trace)
                .arg("-c")
                .arg(vroot.join("include").join(s))
                .arg("-o")
                .arg(tmp.join(s.replace(".cpp", ".o"))),
        )?;
    }
    publish(&tmp, &dir)?;
    Ok(objects)
}

fn cxx_flags(trace: bool) -> Vec<String> {
    let t = trace as u8;
    [
        "-fPIC".to_owned(),
        "-O2".to_owned(),
        "-std=c++17".to_owned(),
        "-faligned-new".to_owned(),
        "-DVM_COVERAGE=0".to_owned(),
        "-DVM_SC=0".to_owned(),
        format!("-DVM_TRACE={t}"),
        format!("-DVM_TRACE_VCD={t}"),
        "-DVM_TRACE_FST=0".to_owned(),
        format!("-DFLD_RTL_TRACE={t}"),
    ]
    .into()
}

/// The C++ compiler with the flags every piece of a model is built with and Verilator's
/// include directories.
fn cxx(vroot: &Path, trace: bool) -> Command {
    let inc = vroot.join("include");
    let mut c = Command::new("c++");
    c.args(cxx_flags(trace))
        .arg("-I")
        .arg(inc.join("vltstd"))
        .arg("-I")
        .arg(inc);
    c
}

/// Moves a finished build into place; a concurrent build that got there first wins.
fn publish(tmp: &Path, dir: &Path) -> Result<(), RtlError> {
    match std::fs::rename(tmp, dir) {
        Ok(()) => Ok(()),
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(tmp);
            Ok(())
        }
        Err(e) => Err(RtlError::Io(dir.to_path_buf(), e)),
    }
}

/// Builds the design `spec` names (a file list, or a directory holding `files.f`), or finds it
/// in the cache. `trace` compiles in waveform dumping (slower to simulate).
pub fn build(spec: &Path, trace: bool) -> Result<RtlDesign, RtlError> {
    build_in(&cache_root(), spec, trace)
}

/// [`build`] with an explicit cache root.
pub fn build_in(root: &Path, spec: &Path, trace: bool) -> Result<RtlDesign, RtlError> {
    let list = file_list(spec)?;
    let list = list
        .canonicalize()
        .map_err(|e| RtlError::Io(list.clone(), e))?;
    let version = verilator_version()?;
    let key = design_key(&list, trace, &version)?;
    let dir = root.join(&key);
    let library = dir.join("libfldrtl.so");
    let design = |built| RtlDesign {
        library: library.clone(),
        file_list: list.clone(),
        trace,
        built,
    };
    if library.is_file() {
        return Ok(design(false));
    }
    std::fs::create_dir_all(root).map_err(|e| RtlError::Io(root.to_path_buf(), e))?;
    let vroot = verilator_root()?;
    let runtime = runtime_objects(root, &vroot, &version, trace)?;
    let tmp = scratch_dir(root, &key)?;
    let include = tmp.join("include");
    std::fs::create_dir_all(&include).map_err(|e| RtlError::Io(include.clone(), e))?;
    let write = |p: PathBuf, s: &str| std::fs::write(&p, s).map_err(|e| RtlError::Io(p, e));
    write(include.join("fld_accel.vh"), crate::HEADER)?;
    write(tmp.join("fld_rtl_shim.cpp"), crate::SHIM)?;
    let obj = tmp.join("obj");
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut verilate = Command::new("verilator");
    verilate
        .args([
            "--cc",
            "--build",
            "-O3",
            "--x-assign",
            "fast",
            "--x-initial",
            "fast",
        ])
        .args(["-Wno-fatal", "--prefix", "Vfld_top"])
        .args(["-j", &jobs.to_string()])
        .arg("-CFLAGS")
        .arg(cxx_flags(trace).join(" "))
        .args(["-MAKEFLAGS", "OPT_FAST=-O2 OPT_SLOW=-O1 OPT_GLOBAL=-O2"])
        .arg("-Mdir")
        .arg(&obj)
        // Verilator takes the directory joined to the flag.
        .arg(format!("-I{}", include.display()))
        .arg("-F")
        .arg(&list);
    if trace {
        verilate.arg("--trace");
    }
    run("verilator", &mut verilate)?;
    run(
        "linking the model",
        cxx(&vroot, trace)
            .arg("-shared")
            .arg("-I")
            .arg(&obj)
            .arg(tmp.join("fld_rtl_shim.cpp"))
            .args(&runtime)
            .arg(obj.join("Vfld_top__ALL.a"))
            .arg("-pthread")
            .arg("-o")
            .arg(tmp.join("libfldrtl.so")),
    )?;
    publish(&tmp, &dir)?;
    Ok(design(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_list_words_drop_comments() {
        let w = list_words("--top-module x // the top\n# a comment\na.v  b.sv\n");
        assert_eq!(w, ["--top-module", "x", "a.v", "b.sv"]);
    }

    #[test]
    fn a_design_key_follows_its_sources() {
        let d = std::env::temp_dir().join(format!("fld-rtl-key-{}", std::process::id()));
        std::fs::create_dir_all(d.join("inc")).unwrap();
        std::fs::write(d.join("files.f"), "--top-module t\nt.v\n+incdir+inc\n").unwrap();
        std::fs::write(d.join("t.v"), "module t; endmodule\n").unwrap();
        std::fs::write(d.join("inc/defs.vh"), "`define A 1\n").unwrap();
        let list = d.join("files.f");
        let k0 = design_key(&list, false, "v").unwrap();
        assert_eq!(k0, design_key(&list, false, "v").unwrap());
        assert_ne!(k0, design_key(&list, true, "v").unwrap());
        assert_ne!(k0, design_key(&list, false, "w").unwrap());
        std::fs::write(d.join("inc/defs.vh"), "`define A 2\n").unwrap();
        let k1 = design_key(&list, false, "v").unwrap();
        assert_ne!(k0, k1);
        std::fs::write(d.join("t.v"), "module t; wire a; endmodule\n").unwrap();
        assert_ne!(k1, design_key(&list, false, "v").unwrap());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
