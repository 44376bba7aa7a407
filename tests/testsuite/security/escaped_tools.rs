//! Nothing a tool of Pi started outlives a SIGKILLed runner (the OOM killer, a Kubernetes or
//! Slurm hard stop), through real Pi: its bash tool runs commands in a process group of their
//! own, and a prompt-injected command may start a session of its own too. The runner starts Pi
//! through a reaper that outlives it and kills everything below it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

both_versions!(tool_commands_in_any_group_or_session_die_with_a_sigkilled_runner);

fn tool_commands_in_any_group_or_session_die_with_a_sigkilled_runner(v: &str) {
    let env = TestEnv::new(
        v,
        &[ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("m")])],
    );
    // The model asks for a command that leaves one process in the bash tool's group and one
    // in a session of its own, then waits.
    env.llm.script(
        "a",
        "m",
        vec![
            Behaviour::bash("setsid sleep 97 < /dev/null > /dev/null 2>&1 & sleep 96"),
            Behaviour::Ok,
        ],
    );
    let mut runner = env
        .cmd(["--provider", "fake-a", "--model", "m", "do it"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the runner");
    let marker = env.marker();
    let sleeping = |pids: &[u32]| {
        pids.iter()
            .filter(|p| cmdline(**p).starts_with("sleep 9"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids = pids_with_env_marker(&marker);
        if sleeping(&pids) >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the tool commands never started: {:?}",
            pids.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The two sleeps really are outside Pi's process group.
    let groups: std::collections::BTreeSet<i32> = pids_with_env_marker(&marker)
        .iter()
        .filter(|p| cmdline(**p).starts_with("sleep 9"))
        // SAFETY: getpgid only reads a process attribute.
        .map(|p| unsafe { libc::getpgid(*p as i32) })
        .collect();
    assert_eq!(groups.len(), 2, "two groups of their own: {groups:?}");
    runner.kill().expect("SIGKILL the runner");
    let _ = runner.wait();
    let left = wait_no_pids_with_env_marker(&marker, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "left after the runner died: {:?}",
        left.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
    );
}
