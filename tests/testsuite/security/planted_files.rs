//! Files planted where the runner reads or writes: a FIFO or a device at the state file, its
//! lock, the log, Pi's `models.json`/`auth.json`, or `--output`. Each used to hang the runner
//! (a blocking `open` of a FIFO waits for a writer, deaf to signals) or to spend paid requests on
//! a sink that loses the answers. Now each is refused on the descriptor it opened, at once.

use std::os::unix::fs::FileTypeExt as _;
use std::path::Path;
use std::time::Duration;

use crate::support::*;

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

fn one_provider(v: &str) -> TestEnv {
    TestEnv::new(
        v,
        &[ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("m")])],
    )
}

const START: [&str; 5] = ["--no-tools", "--provider", "fake-a", "--model", "m"];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    START.iter().copied().chain(extra.iter().copied()).collect()
}

/// A FIFO at the state file, the lock or the log: the run answers, says once that health is
/// not shared (naming the cause), and leaves the FIFO in place.
#[test]
fn a_fifo_at_a_store_path_costs_shared_health_not_the_answer() {
    for name in [
        "pi-ccswitch-run-state.json",
        "pi-ccswitch-run-state.lock",
        "pi-ccswitch-run.log",
    ] {
        let env = one_provider(PI_NEWEST);
        // A failure first, so the run writes the state and the log.
        env.llm
            .script("a", "m", vec![Behaviour::Status500, Behaviour::Ok]);
        let path = env.agent_dir.join(name);
        mkfifo(&path);
        let out = run_command(
            env.cmd(args(&["--timeout-ms", "20000", "say", "hi"])),
            None,
            Duration::from_secs(30),
        );
        out.assert_success()
            .assert_answer(DEFAULT_TEXT)
            .assert_stderr_contains("not a regular file")
            .assert_no_panic();
        if name != "pi-ccswitch-run.log" {
            out.assert_stderr_count("health is not shared this run", 1);
        }
        assert!(
            std::fs::symlink_metadata(&path)
                .expect("still there")
                .file_type()
                .is_fifo(),
            "{name}: the planted FIFO is left alone"
        );
    }
}

/// `--status` and `--reset all` over a FIFO state file end at once with the reason.
#[test]
fn management_over_a_fifo_state_file_ends_at_once() {
    let env = one_provider(PI_NEWEST);
    mkfifo(&env.agent_dir.join("pi-ccswitch-run-state.json"));
    for flags in [vec!["--status"], vec!["--reset", "all"]] {
        let out = run_command(env.cmd(&flags), None, Duration::from_secs(20));
        out.assert_code(2)
            .assert_stderr_contains("not a regular file")
            .assert_no_panic();
    }
}

/// A FIFO as `models.json` or `/dev/zero` as `auth.json` cannot stall the runner before Pi
/// starts: the run stays inside `--timeout-ms` (Pi itself may wait on the FIFO) and ends
/// cleanly whatever Pi does with them.
#[test]
fn planted_pi_config_files_stay_inside_the_deadline() {
    let env = one_provider(PI_NEWEST);
    let models = env.agent_dir.join("models.json");
    std::fs::remove_file(&models).expect("models.json");
    mkfifo(&models);
    let out = run_command(
        env.cmd(args(&["--timeout-ms", "3000", "say", "hi"])),
        None,
        Duration::from_secs(20),
    );
    out.assert_no_panic()
        .assert_stdout_empty()
        .check(matches!(out.code, 2 | 124), "exit 2 or 124")
        .check(out.elapsed < Duration::from_secs(8), "inside the deadline");
    env.assert_no_orphans();

    let env = one_provider(PI_NEWEST);
    std::os::unix::fs::symlink("/dev/zero", env.agent_dir.join("auth.json")).expect("symlink");
    let out = run_command(
        env.cmd(args(&["--timeout-ms", "5000", "say", "hi"])),
        None,
        Duration::from_secs(20),
    );
    out.assert_no_panic()
        .check(matches!(out.code, 0 | 2 | 124), "a clean ending")
        .check(out.elapsed < Duration::from_secs(10), "inside the deadline");
    env.assert_no_orphans();
}

/// `--output` must be a regular file (or a new one): a device or a FIFO is refused before any
/// job runs, so no answer is paid for and then lost.
#[test]
fn output_must_be_a_regular_file() {
    let env = one_provider(PI_NEWEST);
    let jobs = env.cwd.join("jobs.jsonl");
    std::fs::write(&jobs, "{\"id\":1,\"prompt\":\"hi\"}\n").expect("jobs");
    let fifo = env.cwd.join("results.fifo");
    mkfifo(&fifo);
    let fifo = fifo.display().to_string();
    for (target, resume) in [
        ("/dev/null", false),
        ("/dev/full", false),
        ("/dev/zero", true),
        (fifo.as_str(), false),
        (fifo.as_str(), true),
        ("/tmp", false),
    ] {
        let mut flags = args(&["--batch", "jobs.jsonl", "--jobs", "1", "--output", target]);
        if resume {
            flags.push("--resume");
        }
        let out = run_command(env.cmd(&flags), None, Duration::from_secs(20));
        out.assert_fails_with(2, "is not a regular file");
        assert!(env.llm.requests().is_empty(), "{target}: nothing was sent");
    }
}

/// A tampered state file (or a hostile shared Redis: both go through the same display code)
/// cannot put terminal escapes or forged lines on the operator's screen through `--status`.
#[test]
fn status_shows_stored_text_cleaned() {
    let env = one_provider(PI_NEWEST);
    let state = serde_json::json!({
        "schema_version": 1,
        "updated_at": 1,
        "models": {"fake-a/m": {
            "total_failures": 1,
            "last_failure_at": 1,
            "last_class": "quota",
            "last_error": "402\u{1b}[2J\u{1b}[31m\nok   pi: forged line\r",
        }},
    });
    std::fs::write(
        env.agent_dir.join("pi-ccswitch-run-state.json"),
        state.to_string(),
    )
    .expect("state");
    for flags in [vec!["--status"], vec!["--status", "--json"]] {
        let out = env.run(&flags);
        out.assert_success();
        assert!(
            !out.stdout.contains('\u{1b}') && !out.stdout.contains('\r'),
            "{:?}",
            out.stdout
        );
        assert!(!out.stdout.contains("\\u001b"), "{}", out.stdout);
        assert!(
            !out.stdout.lines().any(|l| l.starts_with("ok   pi")),
            "{}",
            out.stdout
        );
    }
}
