//! A busy key backs off instead of breaking: runs that share nothing (each its own agent dir,
//! as the jobs of a CI matrix on their own machines) on a key that takes fewer requests than
//! they send together are all answered, each refusal waited out for a jittered second or a
//! few (or overflowed to a backup with room), no breaker; a back-off that would pass the
//! deadline ends the run at once with a retry hint in seconds about the busy provider; a key
//! that keeps refusing after the back-off reached its limit is rate-limited for real.

use std::time::Instant;

use super::*;

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("deepseek", "b", vec![ModelSpec::text("m")]),
    ]
}

const FROM_GLM: [&str; 6] = ["--no-tools", "--provider", "glm", "--model", "m", "--json"];

both_versions!(four_runs_that_share_nothing_on_a_busy_key_all_answer);

/// The matrix: four runs at once, the key takes 2 with answers of 5 s, the backup
/// takes 1: one request more than the keys take. Every run answers within its deadline, the
/// refusals are counted (in the fault server and in the refused runs' attempts), and no breaker
/// opens.
fn four_runs_that_share_nothing_on_a_busy_key_all_answer(v: &str) {
    const ANSWER_MS: u64 = 5000;
    let env = TestEnv::new(v, &providers());
    env.llm.set_concurrency_cap("a", Some(2));
    env.llm.set_concurrency_cap("b", Some(1));
    env.llm.set_default(Behaviour::Ok.delayed(ANSWER_MS));
    let dirs: Vec<PathBuf> = (0..4)
        .map(|i| other_agent_dir(&env, &format!("matrix-{i}"), &providers()))
        .collect();
    let started = Instant::now();
    let env = &env;
    let outs: Vec<Output> = std::thread::scope(|s| {
        let runs: Vec<_> = dirs
            .iter()
            .map(|d| {
                s.spawn(move || {
                    let mut args = FROM_GLM.to_vec();
                    args.extend(["--timeout-ms", "60000", "hi"]);
                    run_in(env, d, &args)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("run")).collect()
    });
    eprintln!(
        "four runs in {:?}; refused: glm {}, deepseek {}",
        started.elapsed(),
        env.llm.rejections("a"),
        env.llm.rejections("b")
    );
    let refused = env.llm.rejections("a") + env.llm.rejections("b");
    assert!(refused >= 1, "four requests, room for three");
    let mut signals = 0;
    for o in &outs {
        o.assert_success()
            .assert_stderr_lacks("breaker")
            .assert_stderr_lacks("rate-limited");
        let j = o.json();
        assert_eq!(j["answer"], DEFAULT_TEXT, "{}", o.dump());
        let attempts = j["attempts"].as_array().expect("attempts");
        let refusals = attempts
            .iter()
            .filter(|a| a["capacity_signal"] == true)
            .count();
        signals += refusals;
        if refusals > 0 {
            o.assert_stderr_contains("refused with only this request in flight");
            assert!(j["wait_ms"].as_u64().is_some(), "{}", o.dump());
        }
    }
    assert_eq!(signals, refused, "every refusal is in a run's attempts");
    assert!(env.llm.max_in_flight("a") <= 2 && env.llm.max_in_flight("b") <= 1);
}

/// A key every request of which is refused, and a deadline of 4 s: the run backs off (1 s,
/// then 2 s) and, when the next back-off would pass the deadline, ends at once — exit 1, not
/// a timeout — its retry hint about glm and in seconds, no breaker.
#[test]
fn a_back_off_past_the_deadline_ends_the_run_with_a_hint_in_seconds() {
    let env = TestEnv::new(
        PI_NEWEST,
        &[ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")])],
    );
    env.llm.set_concurrency_cap("a", Some(0));
    let mut args = FROM_GLM.to_vec();
    args.extend(["--timeout-ms", "4000", "hi"]);
    let out = env.run(&args);
    out.assert_code(1)
        .assert_stderr_contains("retry: retrying later could help: glm is busy with other clients' requests; try again in ")
        .assert_stderr_lacks("breaker open");
    let j = out.json();
    let after = j["retry"]["retry_after_ms"].as_u64().expect("a hint");
    assert!(
        after.is_multiple_of(1000) && (1000..=16_000).contains(&after),
        "{after}"
    );
    assert!(env.llm.rejections("a") >= 2, "backed off at least once");
    let status = env.run(["--status", "--json"]);
    assert!(
        !status.stdout.contains("\"rate_limit\""),
        "no breaker: {}",
        status.stdout
    );
}

/// Refused again after the back-off grew to its limit (five back-offs, 15.5–31 s in all):
/// rate-limited for real, the provider's breaker opens, and the hint is that breaker's.
#[test]
fn a_key_that_keeps_refusing_after_the_back_off_is_rate_limited() {
    let env = TestEnv::new(
        PI_NEWEST,
        &[ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")])],
    );
    env.llm.set_concurrency_cap("a", Some(0));
    let mut args = FROM_GLM.to_vec();
    args.extend(["--timeout-ms", "60000", "-v", "hi"]);
    let started = Instant::now();
    let out = env.run(&args);
    let took = started.elapsed();
    out.assert_code(1)
        .assert_stderr_contains("(back-off 5 of 5)")
        .assert_stderr_contains("breaker open: provider glm (rate_limit)");
    assert_eq!(env.llm.rejections("a"), 6, "{}", out.dump());
    assert!(took.as_secs() >= 15, "backed off 15.5 s at least: {took:?}");
    let j = out.json();
    assert!(
        j["retry"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("glm/m is usable again in")),
        "{}",
        out.dump()
    );
}
