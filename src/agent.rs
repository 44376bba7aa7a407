//! Spawns, owns and stops one `pi --mode rpc` process. Never interprets events or decides.
//!
//! Pi runs in its own process group so a stop reaches its children (tool commands) too, and a
//! terminal's Ctrl-C reaches only us: we decide when Pi stops. Its stdin stays open until the
//! run is over (EOF makes Pi exit at once). Its stderr is drained into a bounded buffer that
//! is shown, redacted, only when Pi fails.
//!
//! If the runner itself is killed (SIGKILL, the OOM killer), real Pi exits because its stdin
//! closes — but a wedged Node or a `pi` that ignores stdin would live on. So the kernel is asked
//! to SIGKILL the child when its parent dies (`PR_SET_PDEATHSIG`, which cannot be ignored).
//! Linux ties that signal to the *thread* that forked the child: Pi must be spawned from a thread
//! that lives as long as the run (the runtime's thread), never from a short-lived blocking-pool
//! thread, or Pi would die when that thread retires.
//!
//! That signal reaches Pi only, not the commands its tools started (they are in Pi's group).
//! So each Pi gets a tiny reaper: a `sh` in its own group that waits for EOF on a pipe only the
//! runner holds. The runner's death closes the pipe and the reaper SIGKILLs Pi's group, which
//! still exists then (its members keep the group id from being reused). A runner that ends
//! normally stops Pi's group itself and kills the reaper first.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command as Process};

use crate::rpc::codec::{self, ReadError};
use crate::rpc::{Command, Incoming};

/// Flags every run passes: RPC mode, no session file, no extension discovery.
pub const BASE_ARGS: [&str; 4] = ["--mode", "rpc", "--no-session", "--no-extensions"];

/// Process groups of every live Pi, so a second Ctrl-C can stop them before exiting at once.
static LIVE_GROUPS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// SIGKILLs every live Pi process group (the second-Ctrl-C hard exit).
pub fn kill_all_groups() {
    if let Ok(groups) = LIVE_GROUPS.lock() {
        for pgid in groups.iter() {
            // SAFETY: killpg only sends a signal.
            unsafe {
                libc::killpg(*pgid, libc::SIGKILL);
            }
        }
    }
}

/// Pi's stderr kept for diagnostics (the tail is what matters).
const STDERR_KEEP: usize = 64 * 1024;
/// At most this many of Pi's `Warning:` lines are passed on per Pi process.
const MAX_WARNINGS: usize = 20;
/// A warning line longer than this is cut.
const WARNING_LINE_MAX: usize = 2000;

/// Why Pi could not be started.
#[derive(Debug)]
pub enum SpawnError {
    NotFound(OsString),
    Other(OsString, std::io::Error),
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::NotFound(cmd) => write!(
                f,
                "cannot start Pi: '{}' was not found (install Pi with `npm install -g \
                 @earendil-works/pi-coding-agent`, or set PI_BIN to the real pi executable)",
                cmd.to_string_lossy()
            ),
            SpawnError::Other(cmd, e) => {
                write!(f, "cannot start Pi ('{}'): {e}", cmd.to_string_lossy())
            }
        }
    }
}

impl std::error::Error for SpawnError {}

pub struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    decoder: codec::Decoder,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    warnings: tokio::sync::mpsc::UnboundedReceiver<String>,
    pgid: Option<i32>,
    /// Kills Pi's group if the runner dies without doing so (see the module doc).
    reaper: Option<Child>,
}

impl Agent {
    /// Starts `program --mode rpc --no-session --no-extensions <extra…>`.
    pub fn spawn(program: &OsString, extra: &[String]) -> Result<Agent, SpawnError> {
        let mut cmd = Process::new(program);
        cmd.args(BASE_ARGS)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| match e.kind() {
            // ENOENT also comes back when the file exists but its `#!` interpreter does not.
            ErrorKind::NotFound if std::path::Path::new(program).is_file() => SpawnError::Other(
                program.clone(),
                std::io::Error::new(
                    ErrorKind::NotFound,
                    "the interpreter in its #! line was not found (for Pi: is `node` on PATH?)",
                ),
            ),
            ErrorKind::NotFound => SpawnError::NotFound(program.clone()),
            _ => SpawnError::Other(program.clone(), e),
        })?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        if let (Some(g), Ok(mut groups)) = (pgid, LIVE_GROUPS.lock()) {
            groups.push(g);
        }
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .map(BufReader::new)
            .ok_or_else(|| SpawnError::Other(program.clone(), ErrorKind::BrokenPipe.into()))?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (warn_tx, warnings) = tokio::sync::mpsc::unbounded_channel();
        let stderr_task = child.stderr.take().map(|mut err| {
            let sink = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut chunk = [0u8; 8192];
                let mut line = Vec::new();
                let mut forwarded = 0;
                while let Ok(n) = err.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut buf) = sink.lock() {
                        buf.extend_from_slice(&chunk[..n]);
                        let excess = buf.len().saturating_sub(STDERR_KEEP);
                        buf.drain(..excess);
                    }
                    // Pi's own warnings (`Warning: Model "x" not found …`) are news for the
                    // user even when Pi goes on: pass whole `Warning:` lines along, a bounded few.
                    for &b in &chunk[..n] {
                        if b == b'\n' {
                            let text = String::from_utf8_lossy(&line).trim().to_string();
                            if text.starts_with("Warning:") && forwarded < MAX_WARNINGS {
                                forwarded += 1;
                                let _ = warn_tx.send(text);
                            }
                            line.clear();
                        } else if line.len() < WARNING_LINE_MAX {
                            line.push(b);
                        }
                    }
                }
            })
        });
        let reaper = pgid.and_then(spawn_reaper);
        Ok(Agent {
            child,
            stdin,
            stdout,
            decoder: codec::Decoder::default(),
            stderr,
            stderr_task,
            warnings,
            pgid,
            reaper,
        })
    }

    /// Writes one command line. An error means Pi's stdin is gone (Pi died).
    pub async fn send(&mut self, id: &str, command: &Command) -> std::io::Result<()> {
        match self.stdin.as_mut() {
            Some(stdin) => codec::write_command(stdin, Some(id), command).await,
            None => Err(ErrorKind::BrokenPipe.into()),
        }
    }

    /// The next message from Pi; `Ok(None)` when its stdout closed.
    pub async fn next(&mut self) -> Result<Option<Incoming>, ReadError> {
        codec::read_incoming(&mut self.stdout, &mut self.decoder).await
    }

    /// Pi's `Warning:` lines from stderr, as they come (taken once; later calls get a closed
    /// channel).
    pub fn take_warnings(&mut self) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        let (_, closed) = tokio::sync::mpsc::unbounded_channel();
        std::mem::replace(&mut self.warnings, closed)
    }

    /// Waits for Pi to exit (after its stdout closed), at most `limit`.
    pub async fn exit_status(&mut self, limit: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .ok()?
            .ok()
    }

    /// What Pi wrote on stderr (tail), once the stream has ended or after a short wait.
    pub async fn stderr_text(&mut self) -> String {
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_millis(500), task).await;
        }
        self.stderr
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Stops Pi: close stdin (Pi exits within milliseconds), then SIGTERM and SIGKILL to its
    /// process group if it lingers, and reap it. Safe to call on an exited Pi.
    pub async fn stop(&mut self, grace: Duration) {
        self.stdin = None;
        if self.exit_status(grace).await.is_some() {
            self.kill_group(libc::SIGKILL);
            return;
        }
        self.kill_group(libc::SIGTERM);
        if self
            .exit_status(Duration::from_millis(1500))
            .await
            .is_none()
        {
            self.kill_group(libc::SIGKILL);
            let _ = self.child.kill().await;
        }
        // Children of Pi that ignored SIGTERM must not outlive the run.
        self.kill_group(libc::SIGKILL);
    }

    fn kill_group(&self, signal: i32) {
        if let Some(pgid) = self.pgid {
            // SAFETY: killpg only sends a signal; an exited group yields ESRCH, which is fine.
            unsafe {
                libc::killpg(pgid, signal);
            }
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // The reaper goes first: once Pi's group is gone its id may be reused.
        if let Some(reaper) = self.reaper.as_mut() {
            let _ = reaper.start_kill();
        }
        // Backstop for early returns and panics: no orphaned Pi, ever.
        self.kill_group(libc::SIGKILL);
        if let (Some(g), Ok(mut groups)) = (self.pgid, LIVE_GROUPS.lock()) {
            groups.retain(|x| *x != g);
        }
    }
}

/// Starts the reaper of Pi's group `pgid` (see the module doc); `None` if `sh` cannot run,
/// which costs only the tool commands' clean-up after a SIGKILLed runner.
fn spawn_reaper(pgid: i32) -> Option<Child> {
    Process::new("/bin/sh")
        .args([
            "-c",
            "read -r _; kill -s KILL -- \"-$1\" 2>/dev/null",
            "pi-ccswitch-run-reaper",
        ])
        .arg(pgid.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Not in the terminal's group: a Ctrl-C meant for the runner must not end it.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .ok()
}

/// Asks the kernel to SIGKILL the child when the thread that spawns it (the runtime's thread,
/// alive for the whole run) ends, i.e. when the runner dies however it dies.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Process) {
    let parent = i32::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: only async-signal-safe calls (prctl, getppid) run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The runner may have died before the prctl took effect.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the runner exited while starting Pi"));
            }
            Ok(())
        });
    }
}

/// macOS has no `PR_SET_PDEATHSIG`: there a SIGKILLed runner leaves the stopping of Pi to the
/// reaper (which SIGKILLs Pi's whole group when the runner's pipe closes) and to Pi's stdin EOF.
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Process) {}

/// How long `--version` of node or pi may take (a first start compiles Pi's bundle).
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// `node --version` of the `node` on PATH, for explaining a start-up crash.
pub async fn node_version() -> Option<String> {
    version_of(std::ffi::OsStr::new("node")).await
}

/// `pi --version`, for `--doctor`.
pub async fn pi_version(program: &OsString) -> Option<String> {
    version_of(program).await
}

/// What `program --version` prints, when it succeeds within [`VERSION_TIMEOUT`].
async fn version_of(program: &std::ffi::OsStr) -> Option<String> {
    let mut cmd = Process::new(program);
    cmd.arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    die_with_parent(&mut cmd);
    let out = tokio::time::timeout(VERSION_TIMEOUT, cmd.output())
        .await
        .ok()?
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

/// Where `program` resolves: itself when it contains a `/`, else the first match on PATH.
pub fn resolve_program(program: &OsString) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &std::path::Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = std::path::Path::new(program);
    if program.to_string_lossy().contains('/') {
        return is_exec(path).then(|| path.to_path_buf());
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "PATH lookup mirrors what spawning does"
    )]
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .map(|d| d.join(program))
        .find(|p| is_exec(p))
}
