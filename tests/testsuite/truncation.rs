//! Answers cut at the output limit (issue 29, item 3), through real Pi and the fault server's
//! `finish_reason: "length"`: such an answer is a failure of class `truncated` — the run fails
//! over, to a model with a larger output limit first; no breaker opens; when no model
//! completes, exit 1 with nothing on stdout and the cut text only in `--json`'s `partial`; a
//! batch records the job as failed, so `--resume` runs it again.

use crate::support::*;

const CUT: &str = "The first half of a long answer, cut";

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new(
            "first",
            "first",
            vec![ModelSpec::text("m").max_output(4096)],
        ),
        // Same model id elsewhere: the usual first choice, but its limit is no larger.
        ProviderSpec::new("twin", "twin", vec![ModelSpec::text("m").max_output(4096)]),
        ProviderSpec::new(
            "roomy",
            "roomy",
            vec![ModelSpec::text("big").max_output(32_000)],
        ),
    ]
}

const RUN: [&str; 5] = ["--no-tools", "--provider", "first", "--model", "m"];

fn a_cut_answer_fails_over_to_a_larger_output_limit(v: &str) {
    let env = TestEnv::new(v, &providers());
    env.llm
        .script("first", "*", vec![Behaviour::Truncated(CUT.into())]);
    env.llm
        .script("roomy", "*", vec![Behaviour::text("The whole answer.")]);
    let out = env.run(RUN.iter().copied().chain(["--json", "Write it all."]));
    out.assert_success();
    let j = out.json();
    assert_eq!(j["answer"], "The whole answer.", "{}", out.dump());
    assert_eq!(j["model"]["provider"], "roomy", "{}", out.dump());
    assert_eq!(j["attempts"][0]["class"], "truncated", "{}", out.dump());
    assert_eq!(j["attempts"][0]["scope"], "round", "{}", out.dump());
    assert_eq!(j["partial"], serde_json::Value::Null, "{}", out.dump());
    let routes: Vec<String> = env.llm.requests().iter().map(|r| r.route.clone()).collect();
    assert_eq!(
        routes,
        ["first", "roomy"],
        "twin's limit is no larger\n{}",
        out.dump()
    );

    // No breaker: the model that cut its answer is as healthy as before.
    let status = env.run(["--status", "--json"]).json();
    let row = status["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["model"] == "first/m")
        .cloned()
        .expect("first/m");
    assert_eq!(row["state"], "healthy", "{row}");

    // Plain output: the complete answer only, never the cut one.
    env.llm
        .script("first", "*", vec![Behaviour::Truncated(CUT.into())]);
    env.llm
        .script("roomy", "*", vec![Behaviour::text("The whole answer.")]);
    let out = env.run(RUN.iter().copied().chain(["Write it all."]));
    out.assert_success().assert_stdout_eq("The whole answer.\n");
    out.assert_stdout_lacks(CUT);
}

fn when_every_answer_is_cut_the_run_fails_with_the_partial_in_json_only(v: &str) {
    let env = TestEnv::new(v, &providers());
    for route in ["first", "twin", "roomy"] {
        env.llm.script(
            route,
            "*",
            vec![Behaviour::Truncated(format!("{CUT} by {route}")); 2],
        );
    }
    let out = env.run(RUN.iter().copied().chain(["Write it all."]));
    out.assert_code(1).assert_stdout_empty();
    out.assert_stderr_contains("cut off at the model's output limit");
    out.assert_stderr_lacks(CUT);

    let out = env.run(RUN.iter().copied().chain(["--json", "Write it all."]));
    out.assert_code(1);
    let j = out.json();
    assert_eq!(j["ok"], false, "{}", out.dump());
    assert_eq!(j["answer"], serde_json::Value::Null, "{}", out.dump());
    let partial = j["partial"].as_str().expect("partial");
    assert!(partial.starts_with(CUT), "{partial}");
    let classes: Vec<&str> = j["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["class"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(classes, ["truncated"; 3], "{}", out.dump());
}

fn resume_runs_a_cut_job_again(v: &str) {
    let env = TestEnv::new(
        v,
        &[ProviderSpec::new(
            "only",
            "only",
            vec![ModelSpec::text("m")],
        )],
    );
    let results = env.dir.path().join("results.jsonl");
    let results = results.to_string_lossy().into_owned();
    let jobs = br#"{"id":"long","prompt":"Write it all."}
{"id":"short","prompt":"Say hi."}
"#;
    env.llm.script(
        "only",
        "*",
        vec![Behaviour::Truncated(CUT.into()), Behaviour::text("hi")],
    );
    let batch = [
        "--no-tools",
        "--jobs",
        "1",
        "--batch",
        "-",
        "--output",
        &results,
    ];
    let out = env.run_stdin(batch, jobs);
    out.assert_code(1);
    let written = std::fs::read_to_string(&results).expect("results");
    let lines: Vec<serde_json::Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let long = lines.iter().find(|l| l["id"] == "long").expect("long");
    assert_eq!(long["ok"], false, "{}", out.dump());
    assert_eq!(long["answer"], serde_json::Value::Null, "{}", out.dump());
    assert_eq!(long["partial"], CUT, "{}", out.dump());
    assert_eq!(long["permanent"], false, "{}", out.dump());

    env.llm
        .script("only", "*", vec![Behaviour::text("All of it.")]);
    let resumed = [
        "--no-tools",
        "--batch",
        "-",
        "--output",
        &results,
        "--resume",
    ];
    let out = env.run_stdin(resumed, jobs);
    out.assert_success();
    let written = std::fs::read_to_string(&results).expect("results");
    assert!(written.contains(r#""answer":"All of it.""#), "{written}");
    assert_eq!(
        env.llm.requests().len(),
        3,
        "only the cut job ran again\n{written}"
    );
}

both_versions!(
    a_cut_answer_fails_over_to_a_larger_output_limit,
    when_every_answer_is_cut_the_run_fails_with_the_partial_in_json_only,
    resume_runs_a_cut_job_again,
);
