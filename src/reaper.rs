//! The reaper: a small process of our own between the runner and each Pi, so that nothing Pi
//! starts outlives the runner, however the runner dies and whatever process group or session a
//! tool command moves into.
//!
//! Why a process of its own: a SIGKILLed runner (the OOM killer, a Kubernetes or Slurm hard
//! stop) runs no clean-up code, so whatever kills Pi's tools must be alive after the runner.
//! Pi's bash tool runs its commands in a process group of their own (both Pi versions), so
//! killing Pi's group misses them, and a prompt-injected `setsid sleep 1000 &` would escape any
//! group. On Linux the reaper is a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): every process
//! Pi starts that loses its parent is re-parented to the reaper instead of to init, so the
//! reaper can always find and kill them, in any group or session.
//!
//! Protocol (see `agent.rs` for the runner's side): the runner starts its own binary as
//! `pi-ccswitch-run-reaper --pi-reaper -- PI ARGS…` with Pi's three pipes as its standard
//! streams, the read end of a *lifeline* pipe on fd 3 (only the runner holds the write end)
//! and the write end of a *status* pipe on fd 4. The reaper starts Pi (its own process group,
//! the reaper's pipes as Pi's standard streams, killed if the reaper dies), reports Pi's pid —
//! or why Pi could not start — on fd 4, and lets go of Pi's pipes. Then it waits for one of:
//! - Pi exits: every remaining descendant is killed, and the reaper exits as Pi did (same code,
//!   or the same signal), so the runner sees Pi's own exit status;
//! - the lifeline ends (the runner is gone, or done with Pi): Pi's group and every descendant
//!   are SIGKILLed, and the reaper exits.
//!
//! A signal the runner sends to Pi's group does not reach the reaper (its own group); SIGTERM,
//! SIGINT and SIGHUP sent to the reaper itself are passed on to Pi's group.

use std::ffi::OsString;
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::process::{Pid, Signal, WaitOptions, WaitStatus};

/// The argument that selects the reaper (first after the program name). Never a user flag.
pub const FLAG: &str = "--pi-reaper";
/// The reaper's `argv[0]`, as `ps` shows it.
pub const NAME: &str = "pi-ccswitch-run-reaper";
/// The read end of the lifeline.
pub const LIFELINE_FD: RawFd = 3;
/// The write end of the status pipe.
pub const STATUS_FD: RawFd = 4;

/// How long the final sweep keeps looking for descendants that are still being started.
const SWEEP_LIMIT: Duration = Duration::from_secs(3);

/// Runs before `main` in every program that links this library (the binary, the demo, any
/// program that embeds [`crate::run`]): the runner starts *its own executable* as the reaper,
/// and a program whose `main` does other work first (the demo provisions Pi and starts a fake
/// provider) would otherwise run that work again instead of reaping — and start a reaper of
/// its own, without end. Acting before `main` makes every embedding behave as the binary does,
/// whatever its `main` does. Cheap when not selected: one look at the arguments.
///
/// `#[used]` keeps the entry in the link even though nothing names it (rustc keeps `#[used]`
/// statics of an rlib since 1.62).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[used]
#[unsafe(link_section = ".init_array")]
static BEFORE_MAIN: extern "C" fn() = before_main;

#[cfg(target_os = "macos")]
#[used]
#[unsafe(link_section = "__DATA,__mod_init_func")]
static BEFORE_MAIN: extern "C" fn() = before_main;

extern "C" fn before_main() {
    // Not every libc hands its init functions the arguments (musl does not), and std's own
    // copy of them may not be set yet: read them from the kernel where it offers them.
    let args = process_args();
    if selected(&args) {
        run(&args);
    }
}

/// This process's arguments, as the kernel holds them (Linux), else as std has them.
fn process_args() -> Vec<OsString> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::io::Read as _;
        use std::os::unix::ffi::OsStrExt as _;
        // Deciding needs only the first two, and a runner's own arguments can be long (a
        // prompt): the rest is read only when this is a reaper.
        let Ok(mut file) = std::fs::File::open("/proc/self/cmdline") else {
            return Vec::new();
        };
        let mut bytes = Vec::new();
        let probe = 2 + NAME.len() + FLAG.len();
        if (&mut file)
            .take(probe as u64)
            .read_to_end(&mut bytes)
            .is_err()
            || bytes
                .split(|b| *b == 0)
                .nth(1)
                .is_none_or(|a| a != FLAG.as_bytes())
            || file.read_to_end(&mut bytes).is_err()
        {
            return Vec::new();
        }
        // Each argument ends with a NUL; no empty argument after the last.
        bytes
            .strip_suffix(&[0])
            .unwrap_or(&bytes)
            .split(|b| *b == 0)
            .map(|a| std::ffi::OsStr::from_bytes(a).to_os_string())
            .collect()
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        std::env::args_os().collect()
    }
}

/// Whether this process was started as a reaper.
pub fn selected(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|a| a == FLAG)
}

/// What the status pipe says: Pi's pid, or the `errno` of its failed start.
pub fn encode_status(result: Result<u32, i32>) -> String {
    match result {
        Ok(pid) => format!("pid {pid}\n"),
        Err(errno) => format!("err {errno}\n"),
    }
}

/// The status pipe's message, as the runner reads it. Pure.
pub fn decode_status(text: &str) -> Option<Result<u32, i32>> {
    let (kind, value) = text.trim_end().split_once(' ')?;
    match kind {
        "pid" => value.parse().ok().map(Ok),
        "err" => value.parse().ok().map(Err),
        _ => None,
    }
}

/// The reaper's whole life; never returns.
pub fn run(args: &[OsString]) -> ! {
    let Some((program, pi_args)) = split_args(args) else {
        fail("--pi-reaper is internal to pi-ccswitch-run and takes `-- PROGRAM ARGS…`");
    };
    let (Some(lifeline), Some(status)) = (inherited_pipe(LIFELINE_FD), inherited_pipe(STATUS_FD))
    else {
        fail("--pi-reaper is internal to pi-ccswitch-run (it needs the runner's pipes)");
    };
    become_subreaper();
    let wake = Alarm::install(lifeline);
    let mut pi = Command::new(program);
    pi.args(pi_args).process_group(0);
    // SAFETY: pre_exec itself is the unsafe part (the closure runs between fork and exec); it
    // makes one async-signal-safe system call (prctl) and allocates nothing.
    unsafe {
        pi.pre_exec(|| {
            die_with_parent();
            Ok(())
        });
    }
    let child = match pi.spawn() {
        Ok(c) => c,
        Err(e) => {
            report(
                status,
                &encode_status(Err(e.raw_os_error().unwrap_or(libc::EIO))),
            );
            std::process::exit(127);
        }
    };
    // A pid that does not fit a pid_t is no group to signal (never 0, this process's own):
    // say so, stop the child, and go.
    let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) else {
        report(status, &encode_status(Err(libc::EOVERFLOW)));
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        std::process::exit(127);
    };
    // The child is reaped with waitpid below, not through `Child`.
    drop(child);
    test_report_delay();
    report(status, &encode_status(Ok(pid.as_raw_pid().unsigned_abs())));
    // Only Pi holds its pipes now: the runner sees their end when Pi's ends.
    let _ = release_standard_streams();
    let status = watch(pid, &wake);
    // Pi's group is still ours to end (its leftovers keep the group id from being reused until
    // they are gone).
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    sweep();
    exit_as(status)
}

/// For tests only: `CCSWITCH_TEST_REAPER_DELAY_MS` holds the report back that long, as a
/// loaded machine may (the runner must keep serving other jobs meanwhile). Read here, not in
/// `settings`: the reaper is a process of its own, started before any settings exist.
#[expect(
    clippy::disallowed_methods,
    reason = "a test knob of the reaper process, which has no settings"
)]
fn test_report_delay() {
    let ms = std::env::var("CCSWITCH_TEST_REAPER_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if ms > 0 {
        std::thread::sleep(Duration::from_millis(ms.min(30_000)));
    }
}

/// `-- PROGRAM ARGS…` after the flag.
fn split_args(args: &[OsString]) -> Option<(&OsString, &[OsString])> {
    match args.get(2..)? {
        [dashes, program, rest @ ..] if dashes == "--" => Some((program, rest)),
        _ => None,
    }
}

fn fail(message: &str) -> ! {
    crate::console::Console::new().error_line(message);
    std::process::exit(2)
}

/// Takes ownership of a pipe the runner placed at `fd` by protocol (close-on-exec from here:
/// Pi must not hold it); `None` when `fd` is not a pipe.
fn inherited_pipe(fd: RawFd) -> Option<OwnedFd> {
    use rustix::fs::{FileType, fstat};
    // SAFETY: a number inherited by protocol, borrowed for this one call (a number that is not
    // open makes fstat fail with EBADF); no safe call turns an inherited number into a handle.
    let st = fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Fifo {
        return None;
    }
    // SAFETY: open and a pipe (checked above), placed at this number by the runner for this
    // process alone: nothing else here owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC).ok()?;
    Some(owned)
}

/// Orphans anywhere below become our children (Linux); elsewhere the reaper still ends Pi's
/// group when the runner dies.
fn become_subreaper() {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
}

/// Pi dies with the reaper, whatever kills it (Linux; elsewhere the lifeline suffices).
fn die_with_parent() {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
}

/// Writes the one report on the status pipe, which is then closed.
fn report(status: OwnedFd, message: &str) {
    let _ = rustix::io::write(&status, message.as_bytes());
}

/// Puts `/dev/null` on fds 0–2, so Pi alone holds its pipes.
fn release_standard_streams() -> std::io::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    rustix::stdio::dup2_stdin(&null)?;
    rustix::stdio::dup2_stdout(&null)?;
    rustix::stdio::dup2_stderr(&null)?;
    Ok(())
}

/// Why the reaper woke up: a child changed state or a signal came (the pipe), or the
/// lifeline ended.
struct Alarm {
    lifeline: OwnedFd,
    /// The read end of the pipe every watched signal writes to (absent if it could not be
    /// made: then the reaper wakes once a second).
    pipe: Option<OwnedFd>,
    terminate: Arc<AtomicBool>,
}

impl Alarm {
    fn install(lifeline: OwnedFd) -> Alarm {
        use rustix::pipe::{PipeFlags, pipe_with};
        let pipe = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).ok();
        let terminate = Arc::new(AtomicBool::new(false));
        if let Some((_, write)) = &pipe {
            for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                // One descriptor of the pipe's write end per signal (each registration owns one).
                if let Ok(owned) = rustix::io::fcntl_dupfd_cloexec(write, 0) {
                    let _ = signal_hook::low_level::pipe::register_raw(sig, owned);
                }
            }
        }
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            let _ = signal_hook::flag::register(sig, Arc::clone(&terminate));
        }
        Alarm {
            lifeline,
            pipe: pipe.map(|(read, _)| read),
            terminate,
        }
    }

    /// Waits until something may have happened (at most `limit`); true when the lifeline ended.
    fn wait(&self, limit: Duration) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let timeout = Timespec::try_from(limit).ok();
        let mut fds = vec![PollFd::new(&self.lifeline, PollFlags::IN)];
        if let Some(pipe) = &self.pipe {
            fds.push(PollFd::new(pipe, PollFlags::IN));
        }
        let n = poll(&mut fds, timeout.as_ref()).unwrap_or(0);
        // Nothing is ever written on the lifeline: readable (or hung up) means its end.
        let ended = n > 0 && !fds[0].revents().is_empty();
        if n > 0
            && fds.get(1).is_some_and(|f| !f.revents().is_empty())
            && let Some(pipe) = &self.pipe
        {
            let mut sink = [0u8; 64];
            while rustix::io::read(pipe, &mut sink).is_ok_and(|got| got > 0) {}
        }
        ended
    }
}

/// Waits for Pi to exit (its wait status) or for the lifeline to end (`None`), reaping any
/// re-parented orphan on the way and passing termination signals on to Pi's group.
fn watch(pi: Pid, wake: &Alarm) -> Option<WaitStatus> {
    loop {
        while let Ok(Some((reaped, status))) = rustix::process::wait(WaitOptions::NOHANG) {
            if reaped == pi {
                return Some(status);
            }
        }
        if wake.terminate.swap(false, Ordering::Relaxed) {
            let _ = rustix::process::kill_process_group(pi, Signal::TERM);
        }
        if wake.wait(Duration::from_secs(1)) {
            return None;
        }
    }
}

/// Kills every descendant left (they are all our children now, on Linux) until none is left
/// or [`SWEEP_LIMIT`] passes.
fn sweep() {
    let me = std::process::id();
    let started = crate::clock::now().instant;
    loop {
        let children = children_of(me);
        // Reap what already died; the loop ends when no child is left at all (ECHILD).
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) if children.is_empty() => return,
                Err(_) => break,
            }
        }
        for pid in children.into_iter().filter_map(Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        if crate::clock::now()
            .instant
            .saturating_duration_since(started)
            > SWEEP_LIMIT
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pids whose parent is `parent`, from `/proc` (empty where there is none).
fn children_of(parent: u32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parent_in_stat(&stat))
                == Some(parent)
        })
        .collect()
}

/// The parent pid in a `/proc/PID/stat` line (`pid (comm) state ppid …`; `comm` may hold
/// spaces and parentheses, so the fields are read after its last `)`). Pure.
pub fn parent_in_stat(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Ends the reaper the way Pi ended: its exit code, or its signal raised again.
fn exit_as(status: Option<WaitStatus>) -> ! {
    let Some(status) = status else {
        std::process::exit(137)
    };
    if let Some(code) = status.exit_status() {
        std::process::exit(code);
    }
    if let Some(sig) = status.terminating_signal() {
        // The default action of that signal, on ourselves (ends the process).
        let _ = signal_hook::low_level::emulate_default_handler(sig);
        std::process::exit(128 + sig);
    }
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_round_trip_and_garbage_is_refused() {
        assert_eq!(decode_status(&encode_status(Ok(4242))), Some(Ok(4242)));
        assert_eq!(decode_status(&encode_status(Err(2))), Some(Err(2)));
        for bad in ["", "pid", "pid x\n", "ok 1\n", "err -x"] {
            assert_eq!(decode_status(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_parent_is_read_after_the_last_parenthesis() {
        assert_eq!(parent_in_stat("123 (bash) S 45 123 …"), Some(45));
        assert_eq!(parent_in_stat("123 (a) b) (c) R 7 1 1"), Some(7));
        assert_eq!(parent_in_stat("123 (x"), None);
        assert_eq!(parent_in_stat(""), None);
    }

    #[test]
    fn only_the_exact_flag_selects_the_reaper() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(selected(&args(&["x", FLAG, "--", "pi"])));
        assert!(!selected(&args(&["x", "--", FLAG])));
        assert!(!selected(&args(&["x"])));
        assert_eq!(split_args(&args(&["x", FLAG, "pi"])), None);
        let a = args(&["x", FLAG, "--", "pi", "--mode", "rpc"]);
        let (p, rest) = split_args(&a).unwrap();
        assert_eq!(p, "pi");
        assert_eq!(rest, &a[4..]);
    }
}
