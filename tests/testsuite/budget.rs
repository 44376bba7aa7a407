//! Spend caps (`--max-cost`, issue 24 item 6) through real Pi and the fault server, whose usage
//! chunk × the `cost` prices in models.json is what Pi reports as each call's cost: a batch
//! stops at its budget (jobs in flight finish, the rest get no result) and `--resume` with a
//! higher cap answers the rest without sending any job twice; a provider over its own cap sends
//! the jobs to the next candidate; a single run starts no attempt after its cap; bad values
//! and unknown providers are usage errors.

use std::collections::BTreeMap;

use crate::support::batch::*;
use crate::support::*;
use serde_json::Value;

both_versions!(
    a_batch_stops_at_its_budget_and_resume_answers_the_rest,
    a_provider_over_its_cap_sends_the_jobs_to_the_next_candidate,
    a_single_run_starts_no_attempt_after_its_cap,
    negative_tokens_never_make_a_negative_cost,
);

/// 10 per million input tokens, nothing for output: 1000 prompt tokens cost 0.01.
const PRICE: (f64, f64) = (10.0, 0.0);
/// What each answer below costs: 1000 prompt tokens at [`PRICE`].
const JOB_COST: f64 = 0.01;

fn priced_providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new(
            "prim",
            "a",
            vec![ModelSpec::text("m").cost(PRICE.0, PRICE.1)],
        ),
        ProviderSpec::new(
            "back",
            "b",
            vec![ModelSpec::text("m").cost(PRICE.0, PRICE.1)],
        ),
    ]
}

/// Every answer costs [`JOB_COST`] and takes a moment, so that jobs are in flight together.
fn priced_env(version: &str) -> TestEnv {
    let env = TestEnv::new(version, &priced_providers());
    env.llm
        .set_default(Behaviour::text_with_usage("Summary.", 1000, 0).delayed(150));
    env
}

/// Requests per job id, over every request the server got.
fn requests_per_job(env: &TestEnv) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in env.llm.requests() {
        if let Some(id) = job_of(&r) {
            *out.entry(id).or_insert(0) += 1;
        }
    }
    out
}

fn args<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    let mut v = base.to_vec();
    v.extend_from_slice(more);
    v.extend(FROM_PRIM);
    v
}

/// A single run from prim/m with `flags`.
fn single<'a>(flags: &[&'a str]) -> Vec<&'a str> {
    let mut v = flags.to_vec();
    v.extend(FROM_PRIM);
    v.extend(["--", "Summarise."]);
    v
}

/// The test: 20 jobs of a known cost, `--jobs 2`, a cap of 3.5 jobs' worth. At most
/// cap/cost + `--jobs` jobs are answered (here 4 or 5: a job starts while the spend is under
/// the cap, and the one in flight beside it finishes), the batch exits 3 saying how many are
/// left, and `--resume` with a higher cap answers exactly the rest: every job reached the
/// server once.
fn a_batch_stops_at_its_budget_and_resume_answers_the_rest(version: &str) {
    let env = priced_env(version);
    let jobs_file = write_file(&env, "jobs.jsonl", &jobs(20));
    let out = env.dir.path().join("results.jsonl");
    let out_s = out.to_str().unwrap();
    let cap = 0.035;
    let cap_s = cap.to_string();
    let base = ["--batch", &jobs_file, "--jobs", "2", "--output", out_s];
    let first = env.run(args(&base, &["--max-cost", &cap_s]));
    first.assert_code(3).assert_no_panic();
    let rs = read_results(&out);
    let answered = rs.len();
    let most = (cap / JOB_COST).floor() as usize + 2;
    assert!(
        (4..=most).contains(&answered),
        "{answered} answered, expected 4..={most}\n{}",
        first.dump()
    );
    assert!(rs.iter().all(|r| r["ok"] == true), "{rs:?}");
    let recorded: f64 = rs
        .iter()
        .map(|r| r["usage"]["cost"].as_f64().unwrap())
        .sum();
    assert!(
        (recorded - answered as f64 * JOB_COST).abs() < 1e-9,
        "{recorded}"
    );
    let left = 20 - answered;
    first
        .assert_stderr_count("spend cap reached: this run recorded cost", 1)
        .assert_stderr_contains(&format!(
            "batch stopped: budget reached: this run recorded cost {recorded:.6} of --max-cost \
             {cap}; no new job or attempt was started; {left} job(s) left without a result \
             (--resume runs them)"
        ))
        .assert_stderr_contains(&format!("batch: {answered} of 20 jobs done, {answered} ok"));
    assert_eq!(
        env.llm.requests().len(),
        answered,
        "no job was started and left"
    );

    let second = env.run(args(&base, &["--resume", "--max-cost", "1"]));
    second.assert_success();
    second.assert_stderr_contains(&format!(
        "batch: 20 of 20 jobs done, {left} ok, 0 failed, {answered} skipped"
    ));
    let rs = read_results(&out);
    let ok = successes(&rs);
    assert_eq!(ok.len(), 20, "{ok:?}");
    assert!(ok.values().all(|n| *n == 1), "{ok:?}");
    let sent = requests_per_job(&env);
    assert_eq!(sent.len(), 20, "{sent:?}");
    assert!(
        sent.values().all(|n| *n == 1),
        "a job was sent twice: {sent:?}"
    );
}

/// `--max-cost prim=…`: prim answers while it is under its cap (the job that crosses it
/// finishes), then every job starts on back instead; nothing is left and the batch succeeds.
/// With back capped too, nothing is left to spend on: the batch stops as over budget (exit 3).
fn a_provider_over_its_cap_sends_the_jobs_to_the_next_candidate(version: &str) {
    let env = priced_env(version);
    let jobs_file = write_file(&env, "jobs.jsonl", &jobs(10));
    let out = env.dir.path().join("results.jsonl");
    let base = [
        "--batch",
        &jobs_file,
        "--jobs",
        "1",
        "--output",
        out.to_str().unwrap(),
    ];
    let run = env.run(args(&base, &["--max-cost", "prim=0.025"]));
    run.assert_success();
    run.assert_stderr_count(
        "spend cap reached: prim recorded cost 0.030000 of --max-cost prim=0.025; it is skipped \
         for the rest of this run",
        1,
    );
    let rs = read_results(&out);
    let by_model: Vec<String> = rs
        .iter()
        .map(|r| format!("{}/{}", r["model"]["provider"], r["model"]["id"]).replace('"', ""))
        .collect();
    assert_eq!(by_model.len(), 10);
    assert!(by_model[..3].iter().all(|m| m == "prim/m"), "{by_model:?}");
    assert!(by_model[3..].iter().all(|m| m == "back/m"), "{by_model:?}");
    assert_eq!(env.llm.requests_to("a", "m").len(), 3);
    assert_eq!(env.llm.requests_to("b", "m").len(), 7);
    run.assert_stderr_contains("batch: answers by model: back/m 7, prim/m 3;");

    // Both capped: prim's 3 jobs, back's 2, then nothing left to spend on.
    std::fs::remove_file(&out).unwrap();
    let run = env.run(args(&base, &["--max-cost", "prim=0.025,back=0.015"]));
    run.assert_code(3).assert_no_panic();
    assert_eq!(read_results(&out).len(), 5);
    run.assert_stderr_contains(
        "batch stopped: budget reached: every provider left is over its --max-cost cap (back \
         recorded 0.020000 of back=0.015, prim recorded 0.030000 of prim=0.025); no new job or \
         attempt was started; 5 job(s) left without a result (--resume runs them)",
    );
    assert_eq!(
        env.llm.requests().len(),
        10 + 5,
        "nothing sent for the jobs left"
    );

    // A cap on a provider Pi does not list is a typo: exit 2 before anything is sent.
    let before = env.llm.requests().len();
    env.run(args(&base, &["--max-cost", "prim=1,bakc=1"]))
        .assert_fails_with(
            2,
            "--max-cost bakc=…: unknown provider 'bakc': no available model has it; providers \
             with available models: back, prim",
        );
    assert_eq!(env.llm.requests().len(), before);
}

/// A single run: the failed attempt that reaches the cap (an empty answer, priced) is the last;
/// back is never asked, the run exits 3 and says why; `--json` says the same.
fn a_single_run_starts_no_attempt_after_its_cap(version: &str) {
    let env = TestEnv::new(version, &priced_providers());
    env.llm
        .script("a", "m", vec![Behaviour::text_with_usage("", 1000, 0)]);
    let run = env.run(single(&["--max-cost", "0.005"]));
    run.assert_fails_with(
        3,
        "budget reached: this run recorded cost 0.010000 of --max-cost 0.005; no further \
         attempt was started; tried: prim/m; last error: prim/m: the model returned an empty \
         answer",
    );
    assert_eq!(env.llm.requests_to("b", "m").len(), 0, "back never asked");

    // The answer that crosses the cap stands (prim's model breaker is open now: the run
    // starts on back).
    env.llm
        .script("b", "m", vec![Behaviour::text_with_usage("Done.", 1000, 0)]);
    let run = env.run(single(&["--max-cost", "0.005"]));
    run.assert_success().assert_answer("Done.");

    // The same with --json, afresh: one object, exit_code 3, the failed attempt and its cost.
    let env = TestEnv::new(version, &priced_providers());
    env.llm
        .script("a", "m", vec![Behaviour::text_with_usage("", 1000, 0)]);
    let run = env.run(single(&["--json", "--max-cost", "0.005"]));
    run.assert_code(3);
    let v: Value = run.json();
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["exit_code"], 3, "{v}");
    assert_eq!(v["answer"], Value::Null);
    assert_eq!(v["retry"], Value::Null);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("budget reached: this run recorded cost 0.010000 of --max-cost 0.005"),
        "{v}"
    );
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "{v}");
    assert!((v["failed_usage"]["cost"].as_f64().unwrap() - 0.01).abs() < 1e-9);
    assert_eq!(env.llm.requests_to("b", "m").len(), 0);
}

/// Bad values are usage errors (exit 2, one line naming the value) before Pi starts.
#[test]
fn bad_values_are_usage_errors_naming_the_value() {
    let env = TestEnv::new(PI_MIN, &priced_providers());
    for (given, says) in [
        ("-1", "--max-cost '-1': '-1' is not a positive amount"),
        ("NaN", "--max-cost 'NaN': 'NaN' is not a positive amount"),
        ("inf", "--max-cost 'inf': 'inf' is not a positive amount"),
        ("ten", "--max-cost 'ten': 'ten' is not a positive amount"),
        ("prim=", "--max-cost 'prim=': '' is not a positive amount"),
        ("=3", "--max-cost '=3': '=3' names no provider"),
        ("", "--max-cost requires a value"),
        (
            "prim=1,prim=2",
            "--max-cost gives provider 'prim' twice (prim=1 and prim=2)",
        ),
    ] {
        for mode in [&["hello"][..], &["--batch", "-"][..]] {
            let mut a = vec!["--max-cost", given];
            a.extend_from_slice(mode);
            let out = env.run(&a);
            out.assert_fails_with(2, says);
            assert_eq!(out.stderr_lines().len(), 2, "{}", out.dump());
        }
    }
    assert!(env.llm.requests().is_empty());
}

/// Results on stdout (input order): a job whose failed attempt reached the cap is left — no
/// line, no next attempt — while the job in flight beside it finishes and is printed, whether
/// it comes before or after the left one in the input.
#[test]
fn a_job_left_mid_failover_gets_no_line_and_the_one_in_flight_is_printed() {
    let env = TestEnv::new(PI_MIN, &priced_providers());
    env.llm.script(
        "a",
        "m",
        vec![
            Behaviour::text_with_usage("", 2000, 0).delayed(300),
            Behaviour::text_with_usage("Summary.", 1000, 0).delayed(900),
        ],
    );
    let out = env.run_stdin(
        args(&["--batch", "-", "--jobs", "2"], &["--max-cost", "0.015"]),
        jobs(2).as_bytes(),
    );
    out.assert_code(3).assert_no_panic();
    let requests = env.llm.requests_to("a", "m");
    assert_eq!(requests.len(), 2, "{}", out.dump());
    let failed = job_of(&requests[0]).expect("a job");
    let answered = job_of(&requests[1]).expect("a job");
    let lines = out.json_lines();
    assert_eq!(lines.len(), 1, "{}", out.dump());
    assert_eq!(lines[0]["id"], answered.as_str());
    assert_eq!(lines[0]["answer"], "Summary.");
    assert!(env.llm.requests_to("b", "m").is_empty(), "no next attempt");
    out.assert_stderr_contains(
        "batch stopped: budget reached: this run recorded cost 0.030000 of --max-cost 0.015; no \
         new job or attempt was started; 1 job(s) left without a result (with --output FILE, \
         --resume would run them)",
    )
    .assert_stderr_lacks(&format!("{failed}: exit"));
}

/// Issue 29: a provider reporting negative completion tokens never makes a negative cost (it
/// gave `usage.cost -999` and a negative batch total): the run's and the batch's costs stay at
/// least the input's.
fn negative_tokens_never_make_a_negative_cost(v: &str) {
    let env = TestEnv::new(
        v,
        &[ProviderSpec::new(
            "p",
            "p",
            vec![ModelSpec::text("m").cost(10.0, 10.0)],
        )],
    );
    env.llm
        .script("p", "*", vec![Behaviour::NegativeUsage("ok".into()); 3]);
    let run = ["--no-tools", "--provider", "p", "--model", "m"];
    let out = env.run(run.iter().copied().chain(["--json", "hi"]));
    out.assert_success();
    let cost = out.json()["usage"]["cost"].as_f64().expect("cost");
    assert!(cost >= 0.0, "cost {cost}\n{}", out.dump());
    let out = env.run_stdin(
        run.iter().copied().chain(["--batch", "-"]),
        b"{\"id\":1,\"prompt\":\"a\"}\n{\"id\":2,\"prompt\":\"b\"}\n",
    );
    out.assert_success();
    for line in out.json_lines() {
        let cost = line["usage"]["cost"].as_f64().expect("cost");
        assert!(cost >= 0.0, "cost {cost}\n{}", out.dump());
    }
    assert!(
        !out.stderr.contains("$-"),
        "a negative total\n{}",
        out.dump()
    );
}
