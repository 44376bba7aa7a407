//! The npm distribution (issue 25), with the real npm: `npm/pack` packs the binary this test
//! build made as the host's platform package, npm installs the tarballs offline into a temp
//! prefix (a fresh cache, no registry), and the installed command must behave like the binary —
//! `--version`, a real failover through real Pi and the fault server, exit 124 on
//! `--timeout-ms`, 143 on SIGTERM to the command's PID with no orphaned Pi — installed normally,
//! with `--ignore-scripts`, and in a project through `npx`. Without the platform package, the
//! command prints one line naming it and exits 2. Also: every package's version is the crate's,
//! no package has an install script, and the launcher finds the binary in each layout npm and
//! pnpm make.
//!
//! npm runs under the Node 22 the harness provisions; when npm is missing these tests fail.

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::support::*;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PROMPT: &str = "Summarise the plan.";
const FALLBACK_TEXT: &str = "Answer from the fallback.";

/// The platform package the test binary stands in for (it is linked against the host's glibc).
fn host_platform() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "linux-arm64-gnu"
    } else {
        "linux-x64-gnu"
    }
}

/// `npm` on PATH, or a failure saying why the test cannot run.
fn npm() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("npm"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`npm` not found on PATH: the npm packages are installed with the real npm \
                 (install Node.js with npm)"
            )
        })
}

/// PATH with the provisioned Node 22 first (npm's `#!/usr/bin/env node` then runs under it).
fn node_path() -> std::ffi::OsString {
    let mut dirs = vec![pi_env::node_bin_dir().to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH entries contain ':'")
}

/// Run `cmd` (npm or npm/pack) to success, or fail the test with its output.
fn run_ok(mut cmd: Command, what: &str) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {:?}: {e}", cmd.get_program()));
    assert!(
        out.status.success(),
        "{what} failed ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// npm with a private cache and no user/global npmrc (no registry or mirror settings leak in).
fn npm_cmd(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(npm());
    cmd.args(args)
        .env("PATH", node_path())
        .env("HOME", home)
        .env("npm_config_cache", home.join("npm-cache"))
        .env("npm_config_userconfig", home.join("npmrc"))
        .env("npm_config_globalconfig", home.join("npmrc-global"))
        .env("npm_config_update_notifier", "false")
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false");
    cmd
}

/// The tarballs of one `npm/pack` run.
struct Packed {
    _dir: tempfile::TempDir,
    out: PathBuf,
}

impl Packed {
    fn main_tgz(&self) -> PathBuf {
        self.out.join(format!("pi-ccswitch-run-{VERSION}.tgz"))
    }
    fn platform_tgz(&self, platform: &str) -> PathBuf {
        self.out
            .join(format!("pi-ccswitch-run-{platform}-{VERSION}.tgz"))
    }
    /// The `package.json` inside every tarball, as npm would publish it; fails on a tarball that
    /// holds a `binding.gyp` (npm runs node-gyp for those, an install script in all but name).
    fn manifests(&self) -> Vec<(PathBuf, serde_json::Value)> {
        let mut found = Vec::new();
        for e in std::fs::read_dir(&self.out).expect("read the tarball dir") {
            let tgz = e.expect("tarball dir entry").path();
            if tgz.extension().is_none_or(|x| x != "tgz") {
                continue;
            }
            let tar = |args: &[&str]| {
                let mut cmd = Command::new("tar");
                cmd.arg(args[0]).arg(&tgz).args(&args[1..]);
                String::from_utf8_lossy(&run_ok(cmd, "tar").stdout).into_owned()
            };
            let files = tar(&["-tzf"]);
            assert!(
                !files.lines().any(|f| f.ends_with("binding.gyp")),
                "{}: has a binding.gyp",
                tgz.display()
            );
            let text = tar(&["-xzOf", "package/package.json"]);
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: package.json is not JSON: {e}", tgz.display()));
            found.push((tgz, json));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    }
}

/// `npm/pack --out TMP --binary P=PATH ...`.
fn pack(binaries: &[(&str, &Path)]) -> Packed {
    let dir = tempfile::Builder::new()
        .prefix("pccr-npm-pack-")
        .tempdir()
        .expect("temp dir");
    let out = dir.path().join("npm");
    let mut cmd = Command::new(Path::new(ROOT).join("npm/pack"));
    cmd.arg("--out").arg(&out);
    for (platform, bin) in binaries {
        cmd.arg("--binary")
            .arg(format!("{platform}={}", bin.display()));
    }
    cmd.env("PATH", node_path())
        .env("HOME", dir.path())
        .env("npm_config_cache", dir.path().join("npm-cache"))
        .env("npm_config_userconfig", dir.path().join("npmrc"))
        .env("npm_config_update_notifier", "false");
    run_ok(cmd, "npm/pack");
    Packed { _dir: dir, out }
}

/// The host's packages, packed once for all tests of this file, from the binary this test build
/// made. The debug build is ~140 MB of which ~120 MB are debug info that only slows down packing
/// and each install, so the copy that is packed has it stripped when `strip` (binutils, which
/// cargo's linker needs anyway) is there; the code is the same either way.
fn host_packed() -> &'static Packed {
    static PACKED: OnceLock<(tempfile::TempDir, Packed)> = OnceLock::new();
    let (_, packed) = PACKED.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("pccr-npm-bin-")
            .tempdir()
            .expect("temp dir");
        let copy = dir.path().join("pi-ccswitch-run");
        std::fs::copy(BIN, &copy).expect("copy the test binary");
        let stripped = Command::new("strip")
            .arg("--strip-debug")
            .arg(&copy)
            .status()
            .is_ok_and(|s| s.success());
        if !stripped {
            std::fs::copy(BIN, &copy).expect("copy the test binary");
        }
        let packed = pack(&[(host_platform(), copy.as_path())]);
        (dir, packed)
    });
    packed
}

/// A global install into a temp prefix; `cmd` is the installed `<prefix>/bin/pi-ccswitch-run`.
struct Install {
    _dir: tempfile::TempDir,
    cmd: PathBuf,
}

/// `npm install -g --prefix TMP --offline [extra] TARBALLS...`.
fn install_global(with_platform: bool, extra: &[&str]) -> Install {
    let packed = host_packed();
    let dir = tempfile::Builder::new()
        .prefix("pccr-npm-prefix-")
        .tempdir()
        .expect("temp dir");
    let prefix = dir.path().join("prefix");
    let prefix_s = prefix.to_string_lossy().into_owned();
    let main = packed.main_tgz().to_string_lossy().into_owned();
    let platform = packed
        .platform_tgz(host_platform())
        .to_string_lossy()
        .into_owned();
    let mut args = vec!["install", "-g", "--prefix", &prefix_s, "--offline"];
    args.extend_from_slice(extra);
    args.push(&main);
    if with_platform {
        args.push(&platform);
    }
    run_ok(npm_cmd(dir.path(), &args), "npm install -g --offline");
    let cmd = prefix.join("bin/pi-ccswitch-run");
    assert!(
        cmd.symlink_metadata().is_ok(),
        "npm installed no {}",
        cmd.display()
    );
    Install { _dir: dir, cmd }
}

fn installed() -> &'static Install {
    static I: OnceLock<Install> = OnceLock::new();
    I.get_or_init(|| install_global(true, &[]))
}

fn installed_ignoring_scripts() -> &'static Install {
    static I: OnceLock<Install> = OnceLock::new();
    I.get_or_init(|| install_global(true, &["--ignore-scripts"]))
}

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("m-main")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("m-main")]),
    ]
}

const START: [&str; 6] = [
    "--no-tools",
    "--provider",
    "fake-a",
    "--model",
    "m-main",
    "-v",
];

/// `cmd` with START + `extra` in the environment of `env`.
fn run_installed(env: &TestEnv, cmd: &Path, extra: &[&str]) -> Output {
    let args: Vec<&str> = START.iter().copied().chain(extra.iter().copied()).collect();
    run_command(env.other_cmd(cmd, args), None, RUN_TIMEOUT)
}

#[track_caller]
fn assert_version(cmd: &Path) {
    let env = TestEnv::new(PI_MIN, &providers());
    let out = run_command(env.other_cmd(cmd, ["--version"]), None, RUN_TIMEOUT);
    let bare = run_command(env.cmd(["--version"]), None, RUN_TIMEOUT);
    out.assert_success()
        .assert_stdout_eq(&format!("pi-ccswitch-run {VERSION}\n"));
    assert_eq!(out.stdout, bare.stdout, "same output as the bare binary");
    assert_eq!(out.stderr, bare.stderr, "same stderr as the bare binary");
}

/// One provider answers 402, the other is healthy: the answer comes from the healthy one.
#[track_caller]
fn assert_failover(cmd: &Path) {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "m-main", vec![Behaviour::Status402]);
    env.llm
        .script("b", "m-main", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = run_installed(&env, cmd, &[PROMPT]);
    out.assert_success()
        .assert_answer(FALLBACK_TEXT)
        .assert_stderr_contains("switch fake-a/m-main → fake-b/m-main (quota)");
    assert_eq!(env.llm.requests_to("a", "m-main").len(), 1);
    assert_eq!(env.llm.requests_to("b", "m-main").len(), 1);
    env.assert_no_orphans();
}

#[test]
fn installed_command_prints_the_version() {
    assert_version(&installed().cmd);
}

#[test]
fn installed_command_fails_over_through_real_pi() {
    assert_failover(&installed().cmd);
}

#[test]
fn installed_command_passes_stdin_through() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::text("Read it."));
    let args: Vec<&str> = START.iter().copied().chain(["@-", "summarise"]).collect();
    let out = run_command(
        env.other_cmd(&installed().cmd, args),
        Some(b"piped notes"),
        RUN_TIMEOUT,
    );
    out.assert_success().assert_answer("Read it.");
    let reqs = env.llm.requests();
    let text = reqs[0].last_user_text().unwrap_or_default();
    assert!(text.contains("piped notes"), "stdin reached Pi: {text:?}");
}

/// After `npm install -g` (from the packed tarballs, offline) `man pi-ccswitch-run` finds the
/// package's man page beside the command, and the command prints each shell's completions as
/// `completions/` has them (bash sources its script and completes the command).
#[test]
fn installed_package_has_the_man_page_and_prints_completions() {
    let cmd = &installed().cmd;
    let prefix = cmd.parent().and_then(Path::parent).expect("<prefix>/bin");
    let linked = prefix.join("share/man/man1/pi-ccswitch-run.1");
    assert!(
        linked.exists(),
        "npm linked no man page at {}",
        linked.display()
    );
    // man-db finds <prefix>/share/man from <prefix>/bin on PATH, as after a real global install.
    let mut path = prefix.join("bin").into_os_string();
    path.push(":/usr/bin:/bin");
    let man = |args: &[&str]| {
        let mut c = Command::new("man");
        c.args(args)
            .env_clear()
            .env("PATH", &path)
            .env("MANWIDTH", "100")
            .env("HOME", prefix);
        run_ok(c, "man")
    };
    let found = String::from_utf8_lossy(&man(&["-w", "pi-ccswitch-run"]).stdout).into_owned();
    assert!(
        found
            .trim()
            .starts_with(&prefix.to_string_lossy().into_owned()),
        "man found {found:?}, not the installed page"
    );
    let page = String::from_utf8_lossy(&man(&["-P", "cat", "pi-ccswitch-run"]).stdout).into_owned();
    assert!(
        page.contains("EXIT STATUS") && page.contains("--completions"),
        "{page}"
    );
    let env = TestEnv::new(PI_MIN, &providers());
    for (shell, file) in [
        ("bash", "pi-ccswitch-run.bash"),
        ("zsh", "_pi-ccswitch-run"),
        ("fish", "pi-ccswitch-run.fish"),
        ("powershell", "_pi-ccswitch-run.ps1"),
        ("elvish", "pi-ccswitch-run.elv"),
    ] {
        let out = run_command(
            env.other_cmd(cmd, ["--completions", shell]),
            None,
            RUN_TIMEOUT,
        );
        let committed = std::fs::read_to_string(Path::new(ROOT).join("completions").join(file))
            .expect("committed completions");
        out.assert_success();
        assert_eq!(out.stdout, committed, "--completions {shell}");
    }
    let script = format!(
        "source <('{}' --completions bash) && complete -p pi-ccswitch-run",
        cmd.display()
    );
    let out = run_command(
        env.other_cmd("bash", ["-c", script.as_str()]),
        None,
        RUN_TIMEOUT,
    );
    out.assert_success()
        .assert_stdout_contains("pi-ccswitch-run");
    run_command(
        env.other_cmd(cmd, ["--completions", "tcsh"]),
        None,
        RUN_TIMEOUT,
    )
    .assert_fails_with(2, "invalid value 'tcsh' for --completions");
}

#[track_caller]
fn assert_timeout_124(cmd: &Path) {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Hang);
    let out = run_installed(&env, cmd, &["--timeout-ms", "2500", PROMPT]);
    out.assert_code(124)
        .assert_stderr_contains("timed out")
        .assert_stdout_empty();
    env.assert_no_orphans();
}

/// A signal to the PID of the installed command reaches the binary itself: the launcher has
/// replaced itself with it (the PID's executable is the platform package's binary), so the exit
/// is the binary's (130 for SIGINT, 143 for SIGTERM) and Pi is stopped.
#[track_caller]
fn assert_signal_exit(cmd: &Path, signal: i32, expected: i32) {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Hang);
    let args: Vec<&str> = START.iter().copied().chain([PROMPT]).collect();
    let mut command = env.other_cmd(cmd, args);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().expect("spawn the installed command");
    let pid = child.id();
    let reqs = env.llm.wait_requests(1, Duration::from_secs(30));
    assert_eq!(reqs.len(), 1, "the request reached the provider");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("read /proc/PID/exe");
    assert!(
        exe.ends_with(format!(
            "@pi-ccswitch-run/{}/bin/pi-ccswitch-run",
            host_platform()
        )),
        "the command's PID runs {} (not the binary: the launcher did not exec)",
        exe.display()
    );
    // SAFETY: plain kill(2) to our own child.
    unsafe { libc::kill(pid as i32, signal) };
    // Collect both pipes while waiting, with a limit.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(15)) {
        Ok(out) => out.expect("wait for the installed command"),
        Err(_) => {
            // SAFETY: plain kill(2) of our own child that overstayed.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the installed command did not exit within 15 s of signal {signal}");
        }
    };
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code, expected, "stderr: {stderr}");
    assert!(stdout.is_empty(), "stdout: {stdout}");
    env.assert_no_orphans();
}

#[test]
fn installed_command_times_out_with_124() {
    assert_timeout_124(&installed().cmd);
}

#[test]
fn sigterm_to_the_installed_command_exits_143_without_orphans() {
    assert_signal_exit(&installed().cmd, libc::SIGTERM, 143);
}

#[test]
fn sigint_to_the_installed_command_exits_130_without_orphans() {
    assert_signal_exit(&installed().cmd, libc::SIGINT, 130);
}

/// The other exit codes pass through as well: 1 when every candidate fails, 2 for a usage error.
#[test]
fn installed_command_exits_1_and_2_like_the_binary() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Status402);
    let out = run_installed(&env, &installed().cmd, &[PROMPT]);
    out.assert_code(1)
        .assert_stderr_contains("failover exhausted")
        .assert_stdout_empty();
    let bad = run_command(
        env.other_cmd(&installed().cmd, ["--no-such-flag", "hi"]),
        None,
        RUN_TIMEOUT,
    );
    let bare = run_command(env.cmd(["--no-such-flag", "hi"]), None, RUN_TIMEOUT);
    bad.assert_code(2).assert_stdout_empty();
    assert_eq!(
        bad.stderr, bare.stderr,
        "the same usage error as the bare binary"
    );
    env.assert_no_orphans();
}

#[test]
fn installed_with_ignore_scripts_works_the_same() {
    let cmd = &installed_ignoring_scripts().cmd;
    assert_version(cmd);
    assert_failover(cmd);
    assert_timeout_124(cmd);
    assert_signal_exit(cmd, libc::SIGTERM, 143);
}

#[track_caller]
fn assert_missing_platform_message(out: &Output) {
    out.assert_code(2).assert_stdout_empty();
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "one line on stderr\n{}", out.dump());
    let needed = format!("@pi-ccswitch-run/{}@{VERSION}", host_platform());
    out.assert_stderr_contains(&needed)
        .assert_stderr_contains("cargo install pi-ccswitch-run")
        .assert_stderr_contains("optional dependencies");
}

#[test]
fn without_the_platform_package_one_line_names_it_and_exit_2() {
    let install = install_global(false, &[]);
    let env = TestEnv::new(PI_MIN, &providers());
    let out = run_command(
        env.other_cmd(&install.cmd, ["--version"]),
        None,
        RUN_TIMEOUT,
    );
    assert_missing_platform_message(&out);
}

/// A project install the way npm resolves it from a registry: the main package's
/// optionalDependency is resolved by npm itself (here to the local tarball through `overrides`),
/// hoisted beside it, and run with `npx`; with `--omit=optional` npm leaves it out.
#[test]
fn project_install_runs_through_npx_and_omit_optional_is_one_line() {
    let packed = host_packed();
    let project = |omit: bool| {
        let dir = tempfile::Builder::new()
            .prefix("pccr-npm-project-")
            .tempdir()
            .expect("temp dir");
        let manifest = serde_json::json!({
            "name": "uses-pi-ccswitch-run",
            "version": "1.0.0",
            "private": true,
            "devDependencies": {
                "pi-ccswitch-run": format!("file:{}", packed.main_tgz().display()),
            },
            "overrides": {
                format!("@pi-ccswitch-run/{}", host_platform()):
                    format!("file:{}", packed.platform_tgz(host_platform()).display()),
            },
        });
        std::fs::write(dir.path().join("package.json"), manifest.to_string())
            .expect("write package.json");
        let mut args = vec!["install", "--offline"];
        if omit {
            args.push("--omit=optional");
        }
        let mut cmd = npm_cmd(dir.path(), &args);
        cmd.current_dir(dir.path());
        run_ok(cmd, "npm install --offline (project)");
        dir
    };
    let npx_version = |dir: &Path| {
        let mut cmd = npm_cmd(
            dir,
            &["exec", "--offline", "--", "pi-ccswitch-run", "--version"],
        );
        cmd.current_dir(dir);
        run_command(cmd, None, RUN_TIMEOUT)
    };
    let full = project(false);
    let hoisted = full
        .path()
        .join("node_modules/@pi-ccswitch-run")
        .join(host_platform());
    assert!(hoisted.is_dir(), "npm hoisted the platform package");
    npx_version(full.path())
        .assert_success()
        .assert_stdout_eq(&format!("pi-ccswitch-run {VERSION}\n"));
    let omitted = project(true);
    assert_missing_platform_message(&npx_version(omitted.path()));
}

/// Every package of the matrix, packed with stand-in binaries: one version (the crate's), no
/// install scripts (nor a binding.gyp, which makes npm run node-gyp), the platform fields npm
/// selects by, and the main package depending on each platform package as an optional one.
#[test]
fn every_package_has_the_crate_version_and_no_install_script() {
    let platforms = platform_table();
    let stand_in = Path::new(ROOT).join("LICENSE");
    let binaries: Vec<(&str, &Path)> = platforms
        .iter()
        .map(|p| (p.name.as_str(), stand_in.as_path()))
        .collect();
    let packed = pack(&binaries);
    let manifests = packed.manifests();
    assert_eq!(
        manifests.len(),
        platforms.len() + 1,
        "one package per platform + main"
    );
    for (path, json) in &manifests {
        let where_ = path.display();
        assert_eq!(json["version"], VERSION, "{where_}: version");
        // No lifecycle script at all: preinstall, install, postinstall, prepare, ...
        assert!(json.get("scripts").is_none(), "{where_}: has scripts");
    }
    let main = manifests
        .iter()
        .find(|(_, j)| j["name"] == "pi-ccswitch-run")
        .map(|(_, j)| j)
        .expect("the main package");
    assert_eq!(main["bin"]["pi-ccswitch-run"], "bin/pi-ccswitch-run");
    assert_eq!(main["man"], serde_json::json!(["man/pi-ccswitch-run.1"]));
    let optional = main["optionalDependencies"]
        .as_object()
        .expect("optionalDependencies");
    // A platform that is not built ("none": the crate does not compile for it yet) is not
    // published, so the main package does not depend on it.
    let expected: BTreeSet<String> = platforms
        .iter()
        .filter(|p| p.built != "none")
        .map(|p| format!("@pi-ccswitch-run/{}", p.name))
        .collect();
    assert_eq!(
        optional.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "optionalDependencies"
    );
    assert!(optional.values().all(|v| v == VERSION), "{optional:?}");
    assert!(
        main.get("dependencies").is_none(),
        "nothing else is installed"
    );
    for p in &platforms {
        let (_, json) = manifests
            .iter()
            .find(|(_, j)| j["name"] == format!("@pi-ccswitch-run/{}", p.name))
            .unwrap_or_else(|| panic!("no package for {}", p.name));
        assert_eq!(json["os"], serde_json::json!([p.os]), "{}", p.name);
        assert_eq!(json["cpu"], serde_json::json!([p.cpu]), "{}", p.name);
        if p.os == "win32" {
            // npm's Windows shims cannot run the sh launcher from cmd or PowerShell; the Windows
            // package carries the command itself, the .exe, which they call directly.
            assert_eq!(json["bin"]["pi-ccswitch-run"], "bin/pi-ccswitch-run.exe");
        } else {
            assert!(
                json.get("bin").is_none(),
                "{}: only the main package has the command",
                p.name
            );
        }
        match p.libc.as_str() {
            "-" => assert!(json.get("libc").is_none(), "{}", p.name),
            libc => assert_eq!(json["libc"], serde_json::json!([libc]), "{}", p.name),
        }
    }
    // The launcher knows each platform package by name.
    let launcher =
        std::fs::read_to_string(Path::new(ROOT).join("npm/pi-ccswitch-run/bin/pi-ccswitch-run"))
            .expect("read the launcher");
    for p in &platforms {
        assert!(
            launcher.contains(&p.name),
            "the launcher never picks {}",
            p.name
        );
    }
}

struct Platform {
    name: String,
    os: String,
    cpu: String,
    libc: String,
    /// here | workflow | none
    built: String,
}

/// npm/platforms without its comments.
fn platform_table() -> Vec<Platform> {
    let text =
        std::fs::read_to_string(Path::new(ROOT).join("npm/platforms")).expect("read npm/platforms");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() >= 7, "npm/platforms: short line {l:?}");
            assert!(
                ["here", "workflow", "none"].contains(&f[5]),
                "npm/platforms: built is here, workflow or none: {l:?}"
            );
            Platform {
                name: f[0].into(),
                os: f[1].into(),
                cpu: f[2].into(),
                libc: f[3].into(),
                built: f[5].into(),
            }
        })
        .collect()
}

mod launcher;
