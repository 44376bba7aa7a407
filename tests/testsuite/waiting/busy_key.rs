//! A busy key backs off instead of breaking: runs that share nothing (each its own agent dir,
//! as the jobs of a CI matrix on their own machines) on a key that takes fewer requests than
//! they send together are all answered, each refusal waited out for a jittered second or
//! few, no multi-minute breaker.

use std::time::Instant;

use super::*;

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("deepseek", "b", vec![ModelSpec::text("m")]),
    ]
}

/// The matrix, scaled: four runs at once, the key takes 2 with answers of 3 s, the
/// backup takes 1. Every run answers; the refusals are counted; no breaker opens.
#[test]
fn four_runs_that_share_nothing_on_a_busy_key_all_answer() {
    const ANSWER_MS: u64 = 3000;
    let env = TestEnv::new(PI_NEWEST, &providers());
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
                    run_in(
                        env,
                        d,
                        &[
                            "--no-tools",
                            "--provider",
                            "glm",
                            "--model",
                            "m",
                            "--json",
                            "--timeout-ms",
                            "60000",
                            "-v",
                            "hi",
                        ],
                    )
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("run")).collect()
    });
    let took = started.elapsed();
    for o in &outs {
        eprintln!("{}", o.dump());
    }
    for o in &outs {
        o.assert_success();
        o.assert_stderr_lacks("breaker open");
    }
    eprintln!(
        "four runs in {took:?}; refused: glm {}, deepseek {}",
        env.llm.rejections("a"),
        env.llm.rejections("b")
    );
    assert!(env.llm.max_in_flight("a") <= 2 && env.llm.max_in_flight("b") <= 1);
}
