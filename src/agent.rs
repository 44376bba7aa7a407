//! Spawns, owns and stops one `pi --mode rpc` process. Never interprets events or decides.
//!
//! Pi runs in its own process group so a stop reaches its children (tool commands) too, and a
//! terminal's Ctrl-C reaches only us: we decide when Pi stops. Its stdin stays open until the
//! run is over (EOF makes Pi exit at once). Its stderr is drained into a bounded buffer that
//! is shown, redacted, only when Pi fails.

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
    pgid: Option<i32>,
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
        let stderr_task = child.stderr.take().map(|mut err| {
            let sink = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut chunk = [0u8; 8192];
                while let Ok(n) = err.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut buf) = sink.lock() {
                        buf.extend_from_slice(&chunk[..n]);
                        let excess = buf.len().saturating_sub(STDERR_KEEP);
                        buf.drain(..excess);
                    }
                }
            })
        });
        Ok(Agent {
            child,
            stdin,
            stdout,
            decoder: codec::Decoder::default(),
            stderr,
            stderr_task,
            pgid,
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
        // Backstop for early returns and panics: no orphaned Pi, ever.
        self.kill_group(libc::SIGKILL);
        if let (Some(g), Ok(mut groups)) = (self.pgid, LIVE_GROUPS.lock()) {
            groups.retain(|x| *x != g);
        }
    }
}

/// `node --version` of the `node` on PATH, for explaining a start-up crash.
pub fn node_version() -> Option<String> {
    version_of(std::ffi::OsStr::new("node"))
}

/// `pi --version`, for `--doctor`.
pub fn pi_version(program: &OsString) -> Option<String> {
    version_of(program)
}

/// What `program --version` prints, when it succeeds.
fn version_of(program: &std::ffi::OsStr) -> Option<String> {
    let out = std::process::Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
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
