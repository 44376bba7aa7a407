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
    let left = wait_no_pids_with_env_marker(&marker, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "processes left behind by the demo: {left:?} (all: {:?})",
        pids_with_env_marker(&marker)
    );
}
