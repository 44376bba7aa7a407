//! Batches at the providers' speed (issue 23): through real Pi and the fault server's
//! per-route concurrency caps, a batch keeps within what each key takes, learned, and rejects
//! few requests; `--max-inflight` at the true cap rejects none.

use crate::support::*;

fn three_providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("qwen", "b", vec![ModelSpec::text("m")]),
        ProviderSpec::new("ds", "c", vec![ModelSpec::text("m")]),
    ]
}

fn capped(v: &str, caps: [usize; 3], answer_ms: u64) -> TestEnv {
    let env = TestEnv::new(v, &three_providers());
    for (route, cap) in ["a", "b", "c"].into_iter().zip(caps) {
        env.llm.set_concurrency_cap(route, Some(cap));
        env.llm
            .script(route, "*", vec![Behaviour::Ok.delayed(answer_ms)]);
    }
    env
}

fn jobs_input(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"id\":\"doc-{i}\",\"prompt\":\"Summarise document {i}.\"}}\n"))
        .collect()
}

const FROM_GLM: [&str; 5] = ["--no-tools", "--provider", "glm", "--model", "m"];

fn batch(env: &TestEnv, extra: &[&str], n: usize) -> Output {
    let mut args = vec!["--batch", "-"];
    args.extend(FROM_GLM);
    args.extend_from_slice(extra);
    env.run_stdin(args, jobs_input(n).as_bytes())
}

fn rejected(env: &TestEnv) -> usize {
    ["a", "b", "c"].iter().map(|r| env.llm.rejections(r)).sum()
}

both_versions!(
    three_capped_providers_take_the_batch_at_their_pace,
    max_inflight_at_the_true_cap_rejects_nothing
);

fn three_capped_providers_take_the_batch_at_their_pace(v: &str) {
    let env = capped(v, [3, 2, 2], 400);
    let out = batch(&env, &["--jobs", "8"], 24);
    out.assert_success();
    let rs = out.json_lines();
    assert_eq!(rs.len(), 24);
    assert!(rs.iter().all(|r| r["ok"] == true), "{}", out.dump());
    let requests = env.llm.requests().len();
    let rejected = rejected(&env);
    eprintln!("24 jobs, caps 3/2/2: {requests} requests, {rejected} rejected");
    for (route, cap) in [("a", 3), ("b", 2), ("c", 2)] {
        assert!(
            env.llm.max_in_flight(route) <= cap + 1,
            "{route}: {}",
            out.dump()
        );
    }
    // Finding a cap costs its provider one refused request (its limit rises until the
    // provider says no); a batch this small sees nothing else.
    assert!(
        rejected <= 4,
        "{rejected} of {requests} rejected\n{}",
        out.dump()
    );
    out.assert_stderr_contains("batch: capacity: ");
    out.assert_stderr_lacks("breaker open");
}

fn max_inflight_at_the_true_cap_rejects_nothing(v: &str) {
    let env = capped(v, [2, 2, 2], 200);
    let out = batch(
        &env,
        &["--jobs", "6", "--max-inflight", "glm=2,qwen=2,ds=2"],
        18,
    );
    out.assert_success();
    assert_eq!(out.json_lines().len(), 18);
    assert_eq!(rejected(&env), 0, "{}", out.dump());
    assert!(
        env.llm.requests_to("b", "m").len() + env.llm.requests_to("c", "m").len() > 0,
        "a full primary overflows to the others at once"
    );
}
