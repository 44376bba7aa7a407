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
//! That signal reaches Pi only, not the commands its tools started: Pi's bash tool runs them in
//! a process group of their own, and a command may start a session of its own too. So Pi is
//! started through a reaper (`reaper.rs`: our own binary, a child subreaper on Linux) that
//! outlives a SIGKILLed runner and then kills everything below it. The runner holds the write
//! end of the reaper's lifeline; its death (or `Agent` dropped) ends the lifeline. The reaper
//! reports Pi's pid first, so the runner still signals Pi's group directly to stop it, and it
//! exits as Pi did, so Pi's exit status reaches the runner unchanged.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::{AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command as Process};

use crate::rpc::codec::{self, ReadError};
use crate::rpc::{Command, Incoming};

/// Flags every run passes: RPC mode, no session file, no extension discovery.
pub const BASE_ARGS: [&str; 4] = ["--mode", "rpc", "--no-session", "--no-extensions"];

/// The process groups of every live Pi of this process, so a second Ctrl-C can stop them before
/// the process exits at once. One per process, handed to every [`Agent::spawn`] and to the
/// signal handler; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PiGroups {
    groups: Arc<Mutex<Vec<Pid>>>,
}

impl PiGroups {
    pub fn new() -> PiGroups {
        PiGroups::default()
    }

    fn add(&self, pgid: Pid) {
        if let Ok(mut g) = self.groups.lock() {
            g.push(pgid);
        }
    }

    fn remove(&self, pgid: Pid) {
        if let Ok(mut g) = self.groups.lock() {
            g.retain(|x| *x != pgid);
        }
    }

    /// SIGKILLs every live Pi process group (the second-Ctrl-C hard exit).
    pub fn kill_all(&self) {
        if let Ok(groups) = self.groups.lock() {
            for pgid in groups.iter() {
                let _ = kill_process_group(*pgid, Signal::KILL);
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
    /// Asks the stderr reader to answer once it has read all Pi wrote so far.
    stderr_sync: tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<()>>,
    /// Pi's process group (its pid: the reaper starts it as a group leader).
    pgid: Option<Pid>,
    /// The write end of the reaper's lifeline: closing it makes the reaper kill everything
    /// below it (see the module doc).
    lifeline: Option<OwnedFd>,
    groups: PiGroups,
}

impl Agent {
    /// Starts `program --mode rpc --no-session --no-extensions <extra…>` (through the reaper).
    /// The process is started on this thread (see the module doc); the wait for the reaper's
    /// report is not: it runs on the blocking pool, so other jobs' streams keep flowing while
    /// a Pi starts.
    pub async fn spawn(
        program: &OsString,
        extra: &[String],
        groups: &PiGroups,
    ) -> Result<Agent, SpawnError> {
        let (mut child, pgid, lifeline) = spawn_through_reaper(program, extra).await?;
        if let Some(g) = pgid {
            groups.add(g);
        }
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .map(BufReader::new)
            .ok_or_else(|| SpawnError::Other(program.clone(), ErrorKind::BrokenPipe.into()))?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (warn_tx, warnings) = tokio::sync::mpsc::unbounded_channel();
        let (stderr_sync, mut sync_rx) =
            tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<()>>();
        let stderr_task = child.stderr.take().map(|mut err| {
            let sink = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut chunk = [0u8; 8192];
                let mut line = Vec::new();
                let mut forwarded = 0;
                loop {
                    // Reading comes first: a request to catch up is answered only once the
                    // pipe has nothing more that the event loop knows of.
                    let n = tokio::select! {
                        biased;
                        read = err.read(&mut chunk) => match read {
                            Ok(n) if n > 0 => n,
                            _ => break,
                        },
                        Some(ack) = sync_rx.recv() => {
                            let _ = ack.send(());
                            continue;
                        }
                    };
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
        Ok(Agent {
            child,
            stdin,
            stdout,
            decoder: codec::Decoder::default(),
            stderr,
            stderr_task,
            warnings,
            stderr_sync,
            pgid,
            lifeline: Some(lifeline),
            groups: groups.clone(),
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

    /// Waits until the stderr reader has read everything Pi wrote before what was last read
    /// from its stdout (Pi writes its warnings before it answers, but on another pipe).
    pub async fn stderr_caught_up(&self) {
        let (ack, done) = tokio::sync::oneshot::channel();
        if self.stderr_sync.send(ack).is_ok() {
            let _ = done.await;
        }
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
    /// process group if it lingers, then the lifeline (the reaper kills what is left), and
    /// reap it. Safe to call on an exited Pi.
    pub async fn stop(&mut self, grace: Duration) {
        self.stdin = None;
        // The reaper exits once Pi has and nothing of Pi's is left.
        if self.exit_status(grace).await.is_some() {
            self.backstop_kill();
            return;
        }
        self.kill_group(Signal::TERM);
        if self
            .exit_status(Duration::from_millis(1500))
            .await
            .is_some()
        {
            self.backstop_kill();
            return;
        }
        self.kill_group(Signal::KILL);
        self.lifeline = None;
        if self
            .exit_status(Duration::from_millis(1500))
            .await
            .is_none()
        {
            // A wedged reaper: the last resort.
            let _ = self.child.kill().await;
        }
        self.backstop_kill();
    }

    /// Without a reaper, children of Pi that ignored SIGTERM are killed here.
    fn backstop_kill(&self) {
        if self.lifeline.is_none() && self.pgid.is_some_and(|g| Some(g) == self.direct_pid()) {
            self.kill_group(Signal::KILL);
        }
    }

    /// Pi's pid when Pi is our own child (no reaper could be started).
    fn direct_pid(&self) -> Option<Pid> {
        self.child.id().and_then(pid_of)
    }

    fn kill_group(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            // An exited group yields ESRCH, which is fine.
            let _ = kill_process_group(pgid, signal);
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // Backstop for early returns and panics: no orphaned Pi, ever. Ending the lifeline
        // makes the reaper kill Pi's group and everything below it.
        self.lifeline = None;
        if self.direct_pid().is_some() && self.pgid == self.direct_pid() {
            self.kill_group(Signal::KILL);
        }
        if let Some(g) = self.pgid {
            self.groups.remove(g);
        }
    }
}

/// How long the reaper may take to say it started Pi (a fork and an exec, normally
/// milliseconds; a loaded machine may take longer).
const REAPER_REPORT: Duration = Duration::from_secs(10);

/// Starts Pi through the reaper (see the module doc): the reaper's process (whose pipes are
/// Pi's), Pi's process group, and the lifeline's write end. Without a usable reaper (no
/// `/proc/self/exe`, say), Pi is started directly and only its own group is stopped.
async fn spawn_through_reaper(
    program: &OsString,
    extra: &[String],
) -> Result<(Child, Option<Pid>, OwnedFd), SpawnError> {
    let other = |e: std::io::Error| SpawnError::Other(program.clone(), e);
    let (life_read, life_write) = cloexec_pipe().map_err(other)?;
    let (status_read, status_write) = cloexec_pipe().map_err(other)?;
    let mut cmd = Process::new(reaper_program());
    cmd.arg0(crate::reaper::NAME)
        .arg(crate::reaper::FLAG)
        .arg("--")
        .arg(program)
        .args(BASE_ARGS)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Not in the terminal's group: a Ctrl-C meant for the runner must not end it.
        .process_group(0)
        // It must outlive us to do its job; tokio reaps it once it exits.
        .kill_on_drop(false);
    let (lr, sw) = (life_read.as_raw_fd(), status_write.as_raw_fd());
    // SAFETY: only async-signal-safe calls (fcntl, dup2, close) between fork and exec.
    unsafe {
        cmd.pre_exec(move || place_reaper_fds(lr, sw));
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(_) => return spawn_directly(program, extra).map(|(c, g)| (c, g, life_write)),
    };
    drop(life_read);
    drop(status_write);
    let report = tokio::task::spawn_blocking(move || read_report(&status_read, REAPER_REPORT))
        .await
        .map_err(|e| other(std::io::Error::other(e)))?
        .map_err(other)?;
    match crate::reaper::decode_status(&report) {
        // A pid that does not fit is no group to signal: never one to use as 0 or -1.
        Some(Ok(pid)) => match pid_of(pid) {
            Some(pid) => Ok((child, Some(pid), life_write)),
            None => Err(other(std::io::Error::other(format!(
                "the process that starts Pi reported pid {pid}, which is no process id"
            )))),
        },
        Some(Err(errno)) => Err(spawn_error(
            program,
            std::io::Error::from_raw_os_error(errno),
        )),
        None => Err(other(std::io::Error::other(
            "the process that starts Pi did not report (is the machine out of processes?)",
        ))),
    }
}

/// Pi started as our own child, as before the reaper existed.
fn spawn_directly(
    program: &OsString,
    extra: &[String],
) -> Result<(Child, Option<Pid>), SpawnError> {
    let mut cmd = Process::new(program);
    cmd.args(BASE_ARGS)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    die_with_parent(&mut cmd);
    let child = cmd.spawn().map_err(|e| spawn_error(program, e))?;
    let pgid = child.id().and_then(pid_of);
    Ok((child, pgid))
}

/// What a failed start of `program` means for the user.
fn spawn_error(program: &OsString, e: std::io::Error) -> SpawnError {
    match e.kind() {
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
    }
}

/// This very binary, to run as the reaper (by `/proc/self/exe` on Linux, which works even
/// when the file was replaced by an upgrade while we run).
fn reaper_program() -> std::path::PathBuf {
    if cfg!(target_os = "linux") {
        return std::path::PathBuf::from("/proc/self/exe");
    }
    std::env::current_exe().unwrap_or_else(|_| std::path::PathBuf::from("pi-ccswitch-run"))
}

/// A pipe whose two ends are closed in every child we start (only the reaper gets its ends,
/// placed explicitly): a reaper holding another reaper's lifeline would never see it end.
fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// A process id as the kernel takes it: positive and within `pid_t` (`None` otherwise, so a
/// bad one can never become 0 — this process's own group — in a kill).
fn pid_of(pid: u32) -> Option<Pid> {
    Pid::from_raw(i32::try_from(pid).ok()?)
}

/// In the reaper's child before exec: the lifeline's read end on fd 3 and the status pipe's
/// write end on fd 4, both without close-on-exec. Moved above 10 first, so neither number can
/// clobber the other.
fn place_reaper_fds(lifeline: i32, status: i32) -> std::io::Result<()> {
    // SAFETY: fcntl, dup2 and close on descriptors of this (forked) process. Raw calls: no
    // safe wrapper places a descriptor at a number chosen by protocol (rustix's dup2 wants
    // the target already owned), and after fork nothing may allocate.
    unsafe {
        let a = libc::fcntl(lifeline, libc::F_DUPFD, 10);
        let b = libc::fcntl(status, libc::F_DUPFD, 10);
        if a < 0
            || b < 0
            || libc::dup2(a, crate::reaper::LIFELINE_FD) < 0
            || libc::dup2(b, crate::reaper::STATUS_FD) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        libc::close(a);
        libc::close(b);
    }
    Ok(())
}

/// The reaper's one-line report, waited for at most `limit`.
fn read_report(fd: &OwnedFd, limit: Duration) -> std::io::Result<String> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let timeout = Timespec::try_from(limit).ok();
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    if poll(&mut fds, timeout.as_ref())? == 0 {
        return Err(std::io::Error::other(
            "the process that starts Pi did not report within 10 s",
        ));
    }
    let mut buf = [0u8; 64];
    let n = rustix::io::read(fd, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Asks the kernel to SIGKILL the child when the thread that spawns it (the runtime's thread,
/// alive for the whole run) ends, i.e. when the runner dies however it dies.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Process) {
    let parent = rustix::process::getpid();
    // SAFETY: pre_exec itself is the unsafe part (the closure runs between fork and exec); it
    // makes only async-signal-safe system calls (prctl, getppid) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The runner may have died before the prctl took effect.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other("the runner exited while starting Pi"));
            }
            Ok(())
        });
    }
}

/// macOS has no `PR_SET_PDEATHSIG`: there a SIGKILLed runner leaves the stopping of Pi to the
/// reaper (which SIGKILLs Pi's whole group when the lifeline ends) and to Pi's stdin EOF.
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Process) {}

/// Most output taken from one `!command` of Pi's config (a key is short; more is not one).
const COMMAND_OUTPUT_MAX: u64 = 64 * 1024;

/// What Pi's `!command` config values print, run the way Pi runs them (`sh -c`, output
/// trimmed, nothing on stdin, stderr dropped) so the keys they produce can be masked too, but
/// never worse than Pi would: no terminal (a session of their own, so nothing can prompt on
/// ours), all at once, killed (with anything they started) when `budget` runs out, and at most
/// [`COMMAND_OUTPUT_MAX`] bytes of output each. Commands that fail or print nothing give
/// nothing, as in Pi. Blocking; runs before anything else starts.
pub fn config_command_outputs(commands: &[String], budget: Duration) -> Vec<String> {
    use std::io::Read as _;
    use std::os::unix::process::CommandExt as _;
    let started = crate::clock::now().instant;
    let mut running = Vec::new();
    for command in commands {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", command])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // SAFETY: pre_exec itself is the unsafe part; the closure makes only async-signal-safe
        // system calls (setsid, prctl) and allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                #[cfg(target_os = "linux")]
                let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
                Ok(())
            });
        }
        let Ok(mut child) = cmd.spawn() else {
            continue;
        };
        // A thread reads, so a command that fills the pipe cannot stall us; a channel, so a
        // process that escaped the kill and keeps the pipe open cannot either.
        let reader = child.stdout.take().map(|out| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = out.take(COMMAND_OUTPUT_MAX + 1).read_to_end(&mut bytes);
                let _ = tx.send(bytes);
            });
            rx
        });
        running.push((child, reader));
    }
    let mut outputs = Vec::new();
    for (mut child, reader) in running {
        let ok = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status.success(),
                Ok(None)
                    if crate::clock::now()
                        .instant
                        .saturating_duration_since(started)
                        < budget =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => break false,
            }
        };
        // The session (and group) the command leads, with anything it started.
        if let Some(pid) = pid_of(child.id()) {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = child.wait();
        let Some(bytes) = reader
            .filter(|_| ok)
            .and_then(|r| r.recv_timeout(Duration::from_millis(200)).ok())
        else {
            continue;
        };
        if bytes.len() as u64 <= COMMAND_OUTPUT_MAX
            && let Ok(text) = String::from_utf8(bytes)
            && !text.trim().is_empty()
        {
            outputs.push(text.trim().to_string());
        }
    }
    outputs
}

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
