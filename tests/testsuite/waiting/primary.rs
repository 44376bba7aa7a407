//! `--prefer-primary` (and `CCSWITCH_PREFER_PRIMARY`): a flat-fee primary whose quota window
//! ran out, stating its reset a few seconds ahead, is waited for instead of paying the backup;
//! without the option the jobs fail over as always; `--explain` says which a run would do.

use std::time::Duration;

use crate::support::batch::read_results;

use super::*;

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("qwen", "b", vec![ModelSpec::text("m")]),
    ]
}

fn jobs(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"id\":\"report-{i}\",\"prompt\":\"Summarise report {i}.\"}}\n"))
        .collect()
}

/// The primary answers 3 jobs, then its window is used up until 4 s later (GLM's 1308, the
/// reset in China Standard Time).
fn plan(env: &TestEnv) {
    env.llm.set_default(Behaviour::Ok.delayed(200));
    env.llm.set_quota_window(
        "a",
        Some(QuotaWindow::glm_1308(3, Duration::from_millis(4000))),
    );
}

both_versions!(a_batch_waits_for_its_primarys_stated_reset_instead_of_the_backup);

fn a_batch_waits_for_its_primarys_stated_reset_instead_of_the_backup(v: &str) {
    let env = TestEnv::new(v, &providers());
    plan(&env);
    let results = env.dir.path().join("results.jsonl");
    let results_arg = results.to_str().expect("utf-8").to_string();
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--no-tools",
            "--provider",
            "glm",
            "--model",
            "m",
            "--jobs",
            "2",
            "--prefer-primary",
            "1m",
            "--output",
            &results_arg,
        ],
        jobs(10).as_bytes(),
    );
    eprintln!("{}", out.dump());
    out.assert_success()
        .assert_stderr_contains("job(s) waited for their primary (--prefer-primary)");
    let lines = read_results(&results);
    assert_eq!(lines.len(), 10);
    for l in &lines {
        assert_eq!(l["model"]["provider"], "glm", "{l}");
        let (waited, primary) = (l["wait_ms"].as_u64(), l["primary_wait_ms"].as_u64());
        assert!(waited >= primary, "{l}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l["primary_wait_ms"].as_u64().is_some_and(|ms| ms > 0)),
        "some job waited for the primary"
    );
    assert!(
        env.llm.requests_to("b", "m").is_empty(),
        "nothing paid to the backup"
    );
    assert!(env.llm.quota_refusals("a") >= 1, "the window did run out");
}

/// The same batch without the option: the jobs after the window go to the backup, as always.
#[test]
fn without_the_option_the_jobs_go_to_the_backup() {
    let env = TestEnv::new(PI_NEWEST, &providers());
    plan(&env);
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--no-tools",
            "--provider",
            "glm",
            "--model",
            "m",
            "--jobs",
            "2",
        ],
        jobs(10).as_bytes(),
    );
    out.assert_success()
        .assert_stderr_lacks("waited for their primary");
    let by_backup = out
        .json_lines()
        .iter()
        .filter(|l| l["model"]["provider"] == "qwen")
        .count();
    assert!(by_backup >= 1, "{}", out.dump());
}

/// Unix ms `ms` from now, up to a whole second (as providers state resets).
fn reset_in(ms: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    (now + ms).div_ceil(1000) * 1000
}

/// A single run (no `--wait`) with the variable set: the primary's 1308 states a reset 3 s
/// ahead; the run waits for it and is answered by the primary, its record saying how long.
/// `--explain` with the primary still blocked says the run would wait; past the window, that it
/// would go to the backups.
#[test]
fn a_single_run_waits_for_its_primary_and_explain_says_so() {
    let mut env = TestEnv::new(PI_NEWEST, &providers());
    env.env("CCSWITCH_PREFER_PRIMARY", "10m");
    env.llm.script(
        "a",
        "m",
        vec![
            Behaviour::Status(429, bodies::glm_1308(reset_in(3000))),
            Behaviour::Ok,
        ],
    );
    let args = ["--no-tools", "--provider", "glm", "--model", "m"];
    // The first run meets the 1308 and opens the breaker until the stated reset; it waits.
    let mut run = args.to_vec();
    run.extend(["--json", "hi"]);
    let explain_args: Vec<&str> = args.iter().copied().chain(["--explain", "hi"]).collect();
    let out = env.run(&run);
    eprintln!("{}", out.dump());
    out.assert_success()
        .assert_stderr_contains("for the primary glm/m (glm stated its limit resets at ");
    let j = out.json();
    assert_eq!(j["model"]["provider"], "glm", "{}", out.dump());
    let primary = j["primary_wait_ms"].as_u64().expect("primary_wait_ms");
    assert!(primary >= 1000, "{}", out.dump());
    assert!(j["wait_ms"].as_u64() >= Some(primary));
    assert!(env.llm.requests_to("b", "m").is_empty());
    // The window runs out again, the breaker is open: --explain says what a run would do.
    env.llm.script(
        "a",
        "m",
        vec![Behaviour::Status(429, bodies::glm_1308(reset_in(120_000)))],
    );
    let failed = env.run([
        "--no-tools",
        "--provider",
        "glm",
        "--model",
        "m",
        "--prefer-primary",
        "1s",
        "hi",
    ]);
    failed.assert_success();
    assert!(
        !env.llm.requests_to("b", "m").is_empty(),
        "past 1s: the backup"
    );
    env.run(&explain_args)
        .assert_success()
        .assert_stdout_contains("primary first (--prefer-primary 10m00s): glm/m is back in ")
        .assert_stdout_contains("the run would wait for it instead of going to the backups")
        .assert_stdout_contains(
            "waiting in all (breakers, resets, slots, back-off): up to the deadline",
        )
        .assert_stdout_contains(
            "when a key is busy (refused with only this run's request in flight)",
        );
    let past: Vec<&str> = args
        .iter()
        .copied()
        .chain([
            "--explain",
            "--prefer-primary",
            "30s",
            "--max-wait",
            "20s",
            "hi",
        ])
        .collect();
    let text = env.run(&past);
    text.assert_success()
        .assert_stdout_contains("past the --prefer-primary window: the run would go to the backups")
        .assert_stdout_contains("at most 20s (--max-wait), then fail (exit 1)");
    let mut json = past.clone();
    json.insert(0, "--json");
    let j = env.run(&json).json();
    assert_eq!(j["waiting"]["max_wait_ms"], 20_000, "{j}");
    assert_eq!(j["waiting"]["prefer_primary_ms"], 30_000, "{j}");
    assert_eq!(j["waiting"]["busy_backoff_total_ms"], 31_000, "{j}");
}
