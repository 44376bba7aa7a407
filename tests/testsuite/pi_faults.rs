//! What real Pi cannot be made to do on demand: die mid-run, write garbage, crash at start-up
//! the way it does under a too-old Node. A scripted `pi` (fixtures/fake-pi/pi) plays Pi.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use crate::support::fake_pi::{FakePi, fake_pi};
use crate::support::{BIN, Output, RUN_TIMEOUT, run_command};

fn run_scenario(bin: &Path, scenario: &str) -> Output {
    let fake = FakePi::new();
    run_command(
        fake.cmd_of(bin, scenario, &["say", "hello"]),
        None,
        RUN_TIMEOUT,
    )
}

#[track_caller]
fn fails_with(scenario: &str, phrase: &str) {
    let out = run_scenario(Path::new(BIN), scenario);
    out.assert_code(2).assert_stderr_contains(phrase);
    out.check(out.stdout.is_empty(), "nothing on stdout");
    out.check(!out.stderr.contains("panicked"), "no panic");
}

#[test]
fn pi_dying_before_the_answer_is_exit_2_not_0() {
    fails_with("die-mid-run", "Pi exited before answering");
    fails_with("die-mid-run", "crashed mid-run");
    fails_with("killed-mid-run", "Pi exited before answering");
    fails_with("die-at-start", "exit status 3");
    fails_with("die-at-start", "something broke");
}

#[test]
fn old_node_is_named_as_the_cause() {
    fails_with("old-node", "Pi needs Node.js >= 22.19");
}

#[test]
fn malformed_rpc_output_is_exit_2() {
    fails_with("malformed", "malformed JSONL");
    fails_with("garbage-mid-run", "malformed JSONL");
}

#[test]
fn an_empty_answer_is_exit_2() {
    fails_with("empty", "empty answer");
}

#[test]
fn works_through_a_symlink() {
    let dir = tempfile::tempdir().expect("temp dir");
    let link = dir.path().join("pi-ccswitch-run");
    symlink(BIN, &link).expect("symlink");
    let link2 = dir.path().join("ccsr");
    symlink(&link, &link2).expect("symlink to symlink");
    for bin in [&link, &link2] {
        let out = run_scenario(bin, "ok");
        out.assert_success();
        assert_eq!(out.stdout, "fake answer\n");
    }
}

/// Regression (review): a line that arrives in two pieces while the live status ticks (stderr
/// is a terminal) was cut in half and reported as malformed.
#[test]
fn a_line_split_across_reads_survives_the_status_ticker() {
    let dir = tempfile::tempdir().expect("temp dir");
    let answer = dir.path().join("answer.txt");
    // stderr stays the pseudo-terminal (so the status line ticks); stdout goes to a file.
    let inner = format!("{BIN} say hello > '{}'", answer.display());
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &inner, "/dev/null"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir.path())
        .env("PI_CODING_AGENT_DIR", dir.path().join("agent"))
        .env("PI_BIN", fake_pi())
        .env("FAKE_PI_SCENARIO", "split-line")
        .current_dir(dir.path());
    let out = run_command(cmd, None, RUN_TIMEOUT);
    out.assert_success();
    assert!(
        out.stdout.contains("⟳"),
        "the status line was live: {}",
        out.dump()
    );
    let text = std::fs::read_to_string(&answer).expect("answer file");
    assert_eq!(text, "fake answer\n", "{}", out.dump());
}
