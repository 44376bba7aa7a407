//! README's first command, `cargo run --example demo`, as a test: the example binary (which
//! `cargo test` builds with the tests) embeds the library's `run` the way any program may, so
//! it must behave as the binary does — answer through real Pi, exit 0 — and leave nothing
//! running (its reapers and Pi end with it). `.ci/run` also runs the command itself, as README
//! prints it.

use std::process::Command;
use std::time::Duration;

use crate::support::{pids_with_env_marker, wait_no_pids_with_env_marker};

/// `target/<profile>/examples/demo`, next to this test binary's `deps/`.
fn demo_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>/deps/<test binary>");
    profile_dir.join("examples").join("demo")
}

#[test]
fn the_demo_answers_through_the_backup_and_leaves_nothing_running() {
    let demo = demo_binary();
    assert!(
        demo.is_file(),
        "{} is missing: `cargo test` builds the examples (run the whole suite, or `cargo build --examples`)",
        demo.display()
    );
    let marker = format!("PCCR_DEMO_TEST={}", std::process::id());
    let (key, value) = marker.split_once('=').expect("KEY=VALUE");
    let out = Command::new(&demo)
        .env(key, value)
        .output()
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(
        stdout,
        "Failover matters because a provider that runs out of quota at 02:00 should cost one \
         failed request, not the whole night's batch.\n",
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("switch primary/demo-model → backup/demo-model (quota)"),
        "{stderr}"
    );
    // README prints what the demo prints (both languages show the same block).
    for readme in ["README.md", "README.zh-CN.md"] {
        for expected in readme_demo_lines(readme) {
            assert!(
                stdout
                    .lines()
                    .chain(stderr.lines())
                    .any(|l| matches_shown(&expected, l)),
                "{readme} shows {expected:?}, which the demo did not print:\n{stdout}{stderr}"
            );
        }
    }
    let left = wait_no_pids_with_env_marker(&marker, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "processes left behind by the demo: {left:?} (all: {:?})",
        pids_with_env_marker(&marker)
    );
}

/// The lines of the demo's output as README shows them: the first ```text block after the
/// command in the section of the two commands.
fn readme_demo_lines(readme: &str) -> Vec<String> {
    let text =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(readme))
            .expect("README");
    let at = text
        .find("cargo run --example demo    #")
        .expect("README shows the demo command");
    let open = text[at..].find("```text\n").expect("a text block after it") + at + 8;
    let close = text[open..].find("```").expect("closing fence") + open;
    let lines: Vec<String> = text[open..close].lines().map(str::to_string).collect();
    assert!(lines.len() >= 2, "{readme}: {lines:?}");
    lines
}

/// Whether output line `line` is what README shows as `shown`, where `…` stands for any text
/// (a port, a path, the rest of a long answer).
fn matches_shown(shown: &str, line: &str) -> bool {
    let parts: Vec<&str> = shown.split('…').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return line == shown;
    }
    if !line.starts_with(first) || !line.ends_with(last) || line.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

#[test]
fn shown_lines_match_with_ellipses() {
    assert!(matches_shown("a … b", "a 123 b"));
    assert!(matches_shown("exit 0", "exit 0"));
    assert!(!matches_shown("exit 0", "exit 1"));
    assert!(matches_shown("x …/y/…z", "x /abs/y/q z"));
    assert!(!matches_shown("x …/y/…z", "x /abs/w/q z"));
}
