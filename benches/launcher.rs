//! What the npm launcher adds to a run: `npm/pack` packs this bench's (release) binary as the
//! host's platform package, the real npm installs it offline into a temp prefix, and the bench
//! times `--version` through the installed command and through the bare binary, interleaved in
//! the same run (so both see the same machine load). Target: <= 5 ms added (median).
//!
//! Run: `cargo bench --bench launcher` (add `-- N` for N runs of each, default 300).

#![allow(clippy::disallowed_methods)]

#[path = "../tests/testsuite/support/pi_env.rs"]
mod pi_env;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pi-ccswitch-run");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn host_platform() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "linux-arm64-gnu"
    } else {
        "linux-x64-gnu"
    }
}

/// PATH with the provisioned Node 22 first, for npm.
fn node_path() -> std::ffi::OsString {
    let mut dirs = vec![pi_env::node_bin_dir().to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH entries contain ':'")
}

fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pack and install; returns the installed `<prefix>/bin/pi-ccswitch-run`.
fn install(dir: &Path) -> PathBuf {
    let out = dir.join("npm");
    let npmrc = dir.join("npmrc");
    let with_env = |cmd: &mut Command| {
        cmd.env("PATH", node_path())
            .env("HOME", dir)
            .env("npm_config_cache", dir.join("npm-cache"))
            .env("npm_config_userconfig", &npmrc)
            .env("npm_config_update_notifier", "false")
            .env("npm_config_audit", "false")
            .env("npm_config_fund", "false");
    };
    let mut pack = Command::new(Path::new(ROOT).join("npm/pack"));
    pack.arg("--out")
        .arg(&out)
        .arg("--binary")
        .arg(format!("{}={BIN}", host_platform()));
    with_env(&mut pack);
    run_ok(&mut pack, "npm/pack");
    let version = env!("CARGO_PKG_VERSION");
    let prefix = dir.join("prefix");
    let mut npm = Command::new("npm");
    npm.args(["install", "-g", "--offline", "--prefix"])
        .arg(&prefix)
        .arg(out.join(format!("pi-ccswitch-run-{version}.tgz")))
        .arg(out.join(format!("pi-ccswitch-run-{}-{version}.tgz", host_platform())));
    with_env(&mut npm);
    run_ok(&mut npm, "npm install -g --offline (is npm on PATH?)");
    prefix.join("bin/pi-ccswitch-run")
}

fn time_once(program: &Path) -> Duration {
    let start = Instant::now();
    let status = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let took = start.elapsed();
    assert!(
        status.success(),
        "{} --version: {status}",
        program.display()
    );
    took
}

fn median_ms(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::Builder::new()
        .prefix("pccr-bench-launcher-")
        .tempdir()
        .expect("temp dir");
    let launcher = install(dir.path());
    let bare = PathBuf::from(BIN);
    // Warm the page cache and the dynamic loader for both.
    for _ in 0..10 {
        time_once(&bare);
        time_once(&launcher);
    }
    let (mut b, mut l) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..runs {
        // Alternate which goes first, so neither always runs right after the other.
        if i % 2 == 0 {
            b.push(time_once(&bare));
            l.push(time_once(&launcher));
        } else {
            l.push(time_once(&launcher));
            b.push(time_once(&bare));
        }
    }
    let (mb, ml) = (median_ms(b), median_ms(l));
    println!("launcher overhead, `--version`, median of {runs} interleaved runs each");
    println!();
    println!("| how | median ms |");
    println!("|---|---|");
    println!("| bare binary | {mb:.2} |");
    println!("| npm-installed command (sh launcher + exec) | {ml:.2} |");
    println!(
        "| added by the launcher | {:.2} ({:.2}x; target <= 5 ms) |",
        ml - mb,
        ml / mb
    );
}
