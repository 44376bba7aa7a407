//! Integration-test support: Pi provisioning ([`pi_env`]), the fake LLM ([`fake_llm`]), a real
//! Redis ([`redis`]) and a fault-injecting proxy for it ([`resp_proxy`]), listeners that never
//! answer ([`blackhole`]) and a harness ([`TestEnv`], [`Output`]) that runs the project's binary
//! in an isolated environment.
//!
//! Test modules use it with `use crate::support::*;`.

pub mod batch;
pub mod blackhole;
pub mod fake_llm;
pub mod fake_pi;
pub mod pi_env;
pub mod redis;
pub mod resp_proxy;

/// One `#[test]` per Pi version (`pi_min::NAME`, `pi_newest::NAME`) for each scenario function
/// `fn NAME(version: &str)` of the test crate. Needs `#[macro_use] mod support;`.
macro_rules! both_versions {
    ($($name:ident),* $(,)?) => {
        mod pi_min { $( #[test] fn $name() { super::$name(super::PI_MIN) } )* }
        mod pi_newest { $( #[test] fn $name() { super::$name(super::PI_NEWEST) } )* }
    };
}

pub use blackhole::BlackHole;
pub use fake_llm::{
    Behaviour, DEFAULT_TEXT, FakeLlm, Image, KeyEcho, ModelSpec, ProviderSpec, QuotaWindow,
    Request, TEXT_USAGE, TOOL_USAGE, bodies, closed_port, models_json, write_models_json,
    write_settings_json,
};
pub use pi_env::{PI_MIN, PI_NEWEST, PiInstall, pi};
pub use redis::{RedisConn, RedisServer, Resp, redis_cmd, redis_server_bin, try_redis_cmd};
pub use resp_proxy::{RespFault, RespProxy};

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_pi-ccswitch-run");

/// Default hard limit for [`TestEnv::run`].
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// An isolated environment: a temp dir with an agent dir (`PI_CODING_AGENT_DIR`, holding
/// `models.json`), a HOME and an empty cwd, a running [`FakeLlm`] and a Pi install.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    /// `<dir>/agent` — passed as `PI_CODING_AGENT_DIR`; its path is unique, so it doubles as the
    /// marker for [`pids_with_env_marker`] (see [`TestEnv::marker`]).
    pub agent_dir: PathBuf,
    /// `<dir>/home` — passed as `HOME`.
    pub home: PathBuf,
    /// `<dir>/work` — empty working directory of the child.
    pub cwd: PathBuf,
    pub llm: FakeLlm,
    pub pi: &'static PiInstall,
    /// Extra environment for children (applied after the defaults; may override them).
    pub extra_env: Vec<(OsString, OsString)>,
}

impl TestEnv {
    /// New environment for Pi `pi_version` (`PI_MIN`/`PI_NEWEST`; provisions it or panics) with a
    /// fresh fake server and `models.json` written for `providers`. No settings.json is written.
    pub fn new(pi_version: &str, providers: &[ProviderSpec]) -> TestEnv {
        let pi = pi(pi_version);
        let dir = tempfile::Builder::new()
            .prefix("pccr-test-")
            .tempdir()
            .expect("create temp dir");
        let agent_dir = dir.path().join("agent");
        let home = dir.path().join("home");
        let cwd = dir.path().join("work");
        for d in [&agent_dir, &home, &cwd] {
            std::fs::create_dir_all(d).expect("create test dirs");
        }
        let llm = FakeLlm::start();
        write_models_json(&agent_dir, &llm, providers);
        TestEnv {
            dir,
            agent_dir,
            home,
            cwd,
            llm,
            pi,
            extra_env: Vec::new(),
        }
    }

    /// Write `settings.json` in the agent dir.
    pub fn write_settings(&self, settings: &serde_json::Value) {
        write_settings_json(&self.agent_dir, settings);
    }

    /// Add an environment variable for every child started from now on.
    pub fn env(&mut self, key: impl AsRef<OsStr>, val: impl AsRef<OsStr>) -> &mut Self {
        self.extra_env
            .push((key.as_ref().to_owned(), val.as_ref().to_owned()));
        self
    }

    /// A string found in the environment of every child (and its descendants) of this env.
    pub fn marker(&self) -> String {
        self.agent_dir.to_string_lossy().into_owned()
    }

    fn apply_env(&self, cmd: &mut Command) {
        cmd.env_clear()
            .env("PATH", self.pi.path_env())
            .env("HOME", &self.home)
            .env("PI_CODING_AGENT_DIR", &self.agent_dir)
            .env("PI_BIN", &self.pi.pi_bin)
            .env("LANG", "C.UTF-8")
            .current_dir(&self.cwd);
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
    }

    /// The project binary with `args`, a clean environment (PATH = Node 22 first + system PATH,
    /// HOME, PI_CODING_AGENT_DIR, PI_BIN, LANG=C.UTF-8, plus `extra_env`) and cwd = `self.cwd`.
    pub fn cmd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(BIN);
        cmd.args(args);
        self.apply_env(&mut cmd);
        cmd
    }

    /// Any `program` (a shell, `script`, a symlink to the binary) with `args`, in the same
    /// environment and cwd as [`TestEnv::cmd`].
    pub fn other_cmd<P, I, S>(&self, program: P, args: I) -> Command
    where
        P: AsRef<OsStr>,
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(program);
        cmd.args(args);
        self.apply_env(&mut cmd);
        cmd
    }

    /// The binary with `args` as one shell-quoted line, for `sh -c` / `script -c` pipelines.
    pub fn shell_line<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        std::iter::once(quote(BIN))
            .chain(
                args.into_iter()
                    .map(|a| quote(&a.as_ref().to_string_lossy())),
            )
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `pi` itself with `args` and the same environment as [`TestEnv::cmd`].
    pub fn pi_cmd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(&self.pi.pi_bin);
        cmd.args(args);
        self.apply_env(&mut cmd);
        cmd
    }

    /// Run the binary (stdin = /dev/null) with the [`RUN_TIMEOUT`] safety limit.
    pub fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        run_command(self.cmd(args), None, RUN_TIMEOUT)
    }

    /// Run the binary feeding `stdin` (then EOF).
    pub fn run_stdin<I, S>(&self, args: I, stdin: &[u8]) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        run_command(self.cmd(args), Some(stdin), RUN_TIMEOUT)
    }

    /// Assert that no process carrying this env's marker is left (waits up to 5 s for them to
    /// exit); panics listing the survivors' command lines.
    pub fn assert_no_orphans(&self) {
        let left = wait_no_pids_with_env_marker(&self.marker(), Duration::from_secs(5));
        assert!(
            left.is_empty(),
            "processes left behind: {}",
            left.iter()
                .map(|p| format!("{p}: {}", cmdline(*p)))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

impl Drop for TestEnv {
    /// Safety net for failed tests: SIGKILL whatever still carries this env's marker (only
    /// children of this test can). Tests that care assert [`TestEnv::assert_no_orphans`] first.
    fn drop(&mut self) {
        for pid in pids_with_env_marker(&self.marker()) {
            // SAFETY: kill(2) on a pid whose environment holds our unique agent dir path.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

/// Result of a finished child.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit code; 128+N if killed by signal N.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    /// stdout and stderr for failure messages.
    pub fn dump(&self) -> String {
        format!(
            "exit code {} after {:.2} s\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code,
            self.elapsed.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }

    /// Assert the exit code (printing stdout+stderr on failure).
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "unexpected exit code\n{}", self.dump());
        self
    }

    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        self.assert_code(0)
    }

    #[track_caller]
    pub fn assert_stdout_contains(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}\n{}",
            self.dump()
        );
        self
    }

    #[track_caller]
    pub fn assert_stderr_contains(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}\n{}",
            self.dump()
        );
        self
    }

    /// Assert anything, printing stdout+stderr on failure.
    #[track_caller]
    pub fn check(&self, ok: bool, what: &str) -> &Self {
        assert!(ok, "{what}\n{}", self.dump());
        self
    }

    /// Assert stdout is exactly `expected`.
    #[track_caller]
    pub fn assert_stdout_eq(&self, expected: &str) -> &Self {
        assert_eq!(self.stdout, expected, "unexpected stdout\n{}", self.dump());
        self
    }

    /// Assert stdout is exactly the answer `text` followed by one newline (how the runner prints
    /// a final answer).
    #[track_caller]
    pub fn assert_answer(&self, text: &str) -> &Self {
        self.assert_stdout_eq(&format!("{text}\n"))
    }

    #[track_caller]
    pub fn assert_stdout_empty(&self) -> &Self {
        self.assert_stdout_eq("")
    }

    #[track_caller]
    pub fn assert_stdout_lacks(&self, needle: &str) -> &Self {
        assert!(
            !self.stdout.contains(needle),
            "stdout contains {needle:?}\n{}",
            self.dump()
        );
        self
    }

    #[track_caller]
    pub fn assert_stderr_lacks(&self, needle: &str) -> &Self {
        assert!(
            !self.stderr.contains(needle),
            "stderr contains {needle:?}\n{}",
            self.dump()
        );
        self
    }

    /// Assert `needle` occurs exactly `n` times in stderr (non-overlapping).
    #[track_caller]
    pub fn assert_stderr_count(&self, needle: &str, n: usize) -> &Self {
        let found = self.stderr.matches(needle).count();
        assert_eq!(
            found,
            n,
            "stderr has {needle:?} {found} times, expected {n}\n{}",
            self.dump()
        );
        self
    }

    /// Assert the process did not panic: exit code is not Rust's panic code 101 and stderr has
    /// no panic message or backtrace hint.
    #[track_caller]
    pub fn assert_no_panic(&self) -> &Self {
        self.check(self.code != 101, "exit code 101 (a Rust panic)");
        for needle in ["panicked at", "RUST_BACKTRACE", "stack backtrace:"] {
            self.assert_stderr_lacks(needle);
        }
        self
    }

    /// The usual failure shape: exit `code`, `phrase` on stderr, nothing on stdout, no panic.
    #[track_caller]
    pub fn assert_fails_with(&self, code: i32, phrase: &str) -> &Self {
        self.assert_code(code)
            .assert_stderr_contains(phrase)
            .assert_stdout_empty()
            .assert_no_panic()
    }

    /// Assert the run took at most `limit`.
    #[track_caller]
    pub fn assert_elapsed_at_most(&self, limit: Duration) -> &Self {
        assert!(
            self.elapsed <= limit,
            "took {:?}, limit {limit:?}\n{}",
            self.elapsed,
            self.dump()
        );
        self
    }

    /// stdout parsed as one JSON value (panics with the output if it is not exactly one).
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON value: {e}\n{}", self.dump()))
    }

    /// stdout as JSON lines: every line must be one JSON value; an empty stdout gives `[]`.
    /// Blank lines are errors (JSONL output never has them).
    #[track_caller]
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        if self.stdout.is_empty() {
            return Vec::new();
        }
        self.check(
            self.stdout.ends_with('\n'),
            "JSONL stdout does not end with a newline",
        );
        self.stdout
            .lines()
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_str(line).unwrap_or_else(|e| {
                    panic!(
                        "stdout line {} is not JSON ({e}): {line:?}\n{}",
                        i + 1,
                        self.dump()
                    )
                })
            })
            .collect()
    }

    /// stderr lines, without their newlines.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }
}

/// Run `cmd` to completion with captured stdout/stderr, in its own process group. After
/// `timeout` the whole group is SIGKILLed and the test panics with the captured output.
pub fn run_command(mut cmd: Command, stdin: Option<&[u8]>, timeout: Duration) -> Output {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.get_program()));
    let pid = child.id() as i32;
    if let Some(data) = stdin {
        let mut w = child.stdin.take().expect("stdin pipe");
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out_h = reader(Box::new(child.stdout.take().expect("stdout pipe")));
    let err_h = reader(Box::new(child.stderr.take().expect("stderr pipe")));
    let deadline = start + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for child") {
            break st;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            // SAFETY: plain kill(2) on the child's process group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            break child.wait().expect("wait for killed child");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    // Descendants may still hold the pipes open; don't wait for them forever.
    let join = |h: std::thread::JoinHandle<Vec<u8>>, deadline: Instant| -> (String, bool) {
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            (
                String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned(),
                true,
            )
        } else {
            (String::new(), false)
        }
    };
    // After a kill the pipes close at once; after a normal exit allow 10 s for descendants.
    let grace = if timed_out {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(10)
    };
    let pipe_deadline = Instant::now() + grace;
    let (stdout, out_done) = join(out_h, pipe_deadline);
    let (stderr, err_done) = join(err_h, pipe_deadline);
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let out = Output {
        code,
        stdout,
        stderr,
        elapsed,
    };
    if timed_out {
        panic!(
            "{:?} timed out after {timeout:?}; killed\n{}",
            cmd.get_program(),
            out.dump()
        );
    }
    if !(out_done && err_done) {
        // SAFETY: as above; the group still holds our pipes.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        panic!(
            "{:?} exited but a descendant kept its stdout/stderr open for 10 s (orphan?)\n{}",
            cmd.get_program(),
            out.dump()
        );
    }
    out
}

/// PIDs (other than this process) whose environment contains `marker` (e.g. the unique agent
/// dir path). Zombies have an empty environ and are not reported.
pub fn pids_with_env_marker(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let needle = marker.as_bytes();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(env) = std::fs::read(e.path().join("environ"))
            && !needle.is_empty()
            && env.windows(needle.len()).any(|w| w == needle)
        {
            out.push(pid);
        }
    }
    out
}

/// Poll [`pids_with_env_marker`] until it is empty or `timeout` passes; returns the survivors.
pub fn wait_no_pids_with_env_marker(marker: &str, timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = pids_with_env_marker(marker);
        if pids.is_empty() || Instant::now() >= deadline {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `/proc/<pid>/cmdline` with NULs as spaces ("" if gone).
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// This test binary again, as a worker process of a multi-process test: it runs only the
/// `#[ignore]`d worker test `name` of module `module` (pass `module_path!()`), whose orders come
/// through the environment the caller adds.
pub fn worker_process(module: &str, name: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    // `module_path!()` starts with the crate's name; test names do not.
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    let mut cmd = Command::new(exe);
    cmd.args([
        "--ignored",
        "--exact",
        &format!("{module}::{name}"),
        "--nocapture",
        "--test-threads",
        "1",
    ]);
    cmd
}

/// The orders of a worker process (see [`worker_process`]): panics when run on its own.
#[track_caller]
pub fn worker_order(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("a worker process of a multi-process test, not a test of its own: {name} is unset")
    })
}
