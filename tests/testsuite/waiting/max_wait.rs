//! `--max-wait` (and `CCSWITCH_MAX_WAIT`): one job cannot hold a batch. A job that only a
//! provider answering 503 can take ends by the bound (exit 1, a retry hint, recorded so that
//! `--resume` runs it again) while the others are answered, and the batch's end names it;
//! attempts at the dead endpoint are bounded by its breaker, never left to Pi's retries.

use std::time::Instant;

use crate::support::batch::read_results;

use super::*;

/// glm's window is too small for the long job; only qwen's takes it, and qwen answers 503.
fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("glm", "a", vec![ModelSpec::text("m").context(4000)]),
        ProviderSpec::new("qwen", "q", vec![ModelSpec::text("m").context(200_000)]),
    ]
}

fn input() -> String {
    let long = "lorem ipsum dolor sit amet ".repeat(2000);
    let mut input: String = (0..3)
        .map(|i| format!("{{\"id\":\"report-{i}\",\"prompt\":\"Summarise report {i}.\"}}\n"))
        .collect();
    input.push_str(&format!(
        "{{\"id\":\"the-long-one\",\"prompt\":\"Summarise: {long}\"}}\n"
    ));
    input
}

both_versions!(a_job_that_only_a_dead_provider_can_take_ends_by_max_wait);

fn a_job_that_only_a_dead_provider_can_take_ends_by_max_wait(v: &str) {
    let env = TestEnv::new(v, &providers());
    env.llm.script("q", "*", vec![Behaviour::Status503]);
    let results = env.dir.path().join("results.jsonl");
    let results_arg = results.to_str().expect("utf-8").to_string();
    let args = [
        "--batch",
        "-",
        "--no-tools",
        "--provider",
        "glm",
        "--model",
        "m",
        "--jobs",
        "2",
        "--max-wait",
        "3s",
        "--output",
        &results_arg,
        "--resume",
    ];
    let started = Instant::now();
    let out = env.run_stdin(args, input().as_bytes());
    eprintln!("batch in {:?}\n{}", started.elapsed(), out.dump());
    out.assert_code(1).assert_stderr_contains(
        "batch: 1 job(s) ended by --max-wait 3s (failed, with a retry hint; --resume runs them): \
         the-long-one",
    );
    let lines = read_results(&results);
    assert_eq!(lines.len(), 4);
    let long = lines
        .iter()
        .find(|l| l["id"] == "the-long-one")
        .expect("its line");
    assert_eq!(long["exit_code"], 1);
    assert_eq!(long["permanent"], false, "--resume runs it again");
    assert!(
        long["error"]
            .as_str()
            .is_some_and(|e| e.contains("no candidate is usable within --max-wait 3s")),
        "{long}"
    );
    assert_eq!(long["retry"]["could_help"], true, "{long}");
    assert!(lines.iter().filter(|l| l["ok"] == true).count() == 3);
    // The breaker bounds the attempts at the dead endpoint: the attempt and its one immediate
    // retry, no 2/4/8 s retries by Pi.
    let dead = env.llm.requests_to("q", "m");
    assert!(dead.len() <= 2, "{} attempts at qwen", dead.len());
    // --resume runs it again (and only it): qwen's breaker is still open, and its reopening is
    // past the bound, so it ends by it again without a request.
    env.llm.clear_requests();
    let again = env.run_stdin(args, input().as_bytes());
    again
        .assert_code(1)
        .assert_stderr_contains("ended by --max-wait 3s");
    assert!(env.llm.requests().is_empty(), "{}", again.dump());
    let lines = read_results(&results);
    assert_eq!(lines.len(), 5, "one more line, the long one's");
    assert_eq!(lines[4]["id"], "the-long-one");
}

/// With `--wait` and breakers that reopen within the bound, the job waits, probes once per
/// reopening (never Pi's retries at the open breaker), and ends by `--max-wait`; the variable
/// sets the bound as the flag does. Each request after the first two follows a wait.
#[test]
fn attempts_at_a_dead_endpoint_are_one_per_reopening_until_max_wait() {
    let mut env = TestEnv::new(
        PI_NEWEST,
        &[ProviderSpec::new("qwen", "q", vec![ModelSpec::text("m")])],
    );
    // Endpoint breakers of a few seconds at most.
    env.env("CCSWITCH_COOLDOWN_SCALE", "0.02");
    env.env("CCSWITCH_MAX_WAIT", "12s");
    env.llm.set_default(Behaviour::Status503);
    let out = env.run([
        "--no-tools",
        "--wait",
        "--json",
        "-v",
        "--timeout-ms",
        "60000",
        "hi",
    ]);
    out.assert_code(1);
    let j = out.json();
    assert!(
        j["error"]
            .as_str()
            .is_some_and(|e| e.contains("--max-wait 12s")),
        "{}",
        out.dump()
    );
    let waits = out
        .stderr_lines()
        .iter()
        .filter(|l| l.contains("every candidate is cooling down; waiting"))
        .count();
    let sent = env.llm.requests().len();
    eprintln!("{sent} requests, {waits} waits");
    assert!(waits >= 1, "{}", out.dump());
    assert!(
        sent <= 2 + waits,
        "{sent} requests for {waits} reopenings\n{}",
        out.dump()
    );
    out.assert_stderr_lacks("Pi retries");
    let waited = j["wait_ms"].as_u64().expect("wait_ms");
    assert!(waited <= 12_000, "{waited}");
}

#[test]
fn bad_wait_bounds_are_usage_errors() {
    let env = TestEnv::new(
        PI_NEWEST,
        &[ProviderSpec::new("qwen", "q", vec![ModelSpec::text("m")])],
    );
    env.run(["--max-wait", "30", "hi"])
        .assert_fails_with(2, "--max-wait expects a duration such as 30s, 10m or 1h30m");
    env.run(["--prefer-primary", "2w", "hi"])
        .assert_fails_with(2, "--prefer-primary expects a duration");
    let mut bad = TestEnv::new(
        PI_NEWEST,
        &[ProviderSpec::new("qwen", "q", vec![ModelSpec::text("m")])],
    );
    bad.env("CCSWITCH_PREFER_PRIMARY", "8d");
    bad.run(["hi"]).assert_fails_with(
        2,
        "CCSWITCH_PREFER_PRIMARY is longer than a week (7d), the longest wait taken",
    );
    assert!(env.llm.requests().is_empty() && bad.llm.requests().is_empty());
}
