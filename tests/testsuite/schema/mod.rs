//! Answers that fit a schema (`--output-schema`, issue 33), through real Pi and the fault
//! server, which answers each request with a given text (valid JSON, JSON in a fence, prose,
//! JSON that violates the schema, a huge nested value): conforming the first time; fixed on the
//! re-ask in the same conversation; failed over, with the original conversation, to a model
//! that conforms; nobody conforms (exit 1, class `schema`, the errors and the last raw answer in
//! `--json` only); bad schema files (exit 2, nothing sent); a batch with per-job schemas.

mod recipes;

use serde_json::{Value, json};

use crate::support::*;

/// What a review must be.
fn review_schema() -> Value {
    json!({
        "type": "object",
        "required": ["risk", "summary"],
        "properties": {
            "risk": {"enum": ["low", "medium", "high"]},
            "summary": {"type": "string"}
        },
        "additionalProperties": false
    })
}

const GOOD: &str = "{\"risk\": \"low\",\n  \"summary\": \"Renames a variable.\"}";
const GOOD_LINE: &str = r#"{"risk":"low","summary":"Renames a variable."}"#;
const PROSE: &str = "The diff looks fine to me: it only renames a variable.";
const WRONG: &str = r#"{"risk": "maybe", "summary": "Renames a variable."}"#;
/// The phrase of the re-ask (`schema::prompt::reask`).
const REASK: &str = "does not conform to the JSON Schema";

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("first", "first", vec![ModelSpec::text("m")]),
        ProviderSpec::new("second", "second", vec![ModelSpec::text("n")]),
    ]
}

const RUN: [&str; 7] = [
    "--no-tools",
    "--provider",
    "first",
    "--model",
    "m",
    "--output-schema",
    "review.json",
];

fn env_with_schema(v: &str) -> TestEnv {
    let env = TestEnv::new(v, &providers());
    std::fs::write(env.cwd.join("review.json"), review_schema().to_string()).unwrap();
    env
}

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    RUN.iter().copied().chain(extra.iter().copied()).collect()
}

fn classes(j: &Value) -> Vec<String> {
    j["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["class"].as_str().unwrap_or("ok").to_string())
        .collect()
}

fn conforming_the_first_time(v: &str) {
    let env = env_with_schema(v);
    // A fenced block around the value is accepted; stdout is the value alone, on one line.
    env.llm.script(
        "first",
        "*",
        vec![Behaviour::text(format!("```json\n{GOOD}\n```"))],
    );
    let out = env.run(args(&["Review the diff."]));
    out.assert_success()
        .assert_stdout_eq(&format!("{GOOD_LINE}\n"));
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    // The model was told the schema, after the prompt.
    let asked = reqs[0].last_user_text().expect("a user message");
    assert!(
        asked.starts_with("Review the diff.\n\nAnswer with exactly one JSON value"),
        "{asked}"
    );
    assert!(asked.ends_with(&review_schema().to_string()), "{asked}");

    // --json: the raw answer and the parsed value.
    env.llm.script("first", "*", vec![Behaviour::text(GOOD)]);
    let out = env.run(args(&["--json", "Review the diff."]));
    out.assert_success();
    let j = out.json();
    assert_eq!(j["answer"], GOOD, "{}", out.dump());
    assert_eq!(
        j["structured_output"],
        json!({"risk": "low", "summary": "Renames a variable."})
    );
    assert_eq!(j["schema_errors"], Value::Null);
    assert_eq!(classes(&j), ["ok"]);
}

fn fixed_on_the_reask(v: &str) {
    let env = env_with_schema(v);
    env.llm.script(
        "first",
        "*",
        vec![Behaviour::by_prompt(
            [(REASK, Behaviour::text(GOOD))],
            Behaviour::text(PROSE),
        )],
    );
    let out = env.run(args(&["--json", "Review the diff."]));
    out.assert_success();
    let j = out.json();
    assert_eq!(j["structured_output"]["risk"], "low", "{}", out.dump());
    assert_eq!(j["model"]["provider"], "first");
    assert_eq!(classes(&j), ["schema", "ok"], "{}", out.dump());
    assert_eq!(j["attempts"][0]["scope"], "round");
    // The non-conforming answer is a failed attempt, with its tokens.
    assert!(
        j["failed_usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{}",
        out.dump()
    );
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 2, "{}", out.dump());
    // The re-ask went to the same model, in the same conversation, with what was wrong.
    assert_eq!(reqs[1].route, "first");
    let roles: Vec<&str> = reqs[1]
        .roles()
        .into_iter()
        .filter(|r| *r != "system" && *r != "developer")
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{}", out.dump());
    assert_eq!(
        reqs[1]
            .messages
            .iter()
            .filter(|m| m.role == "assistant")
            .count(),
        1
    );
    assert!(reqs[1].messages.iter().any(|m| m.text.contains(PROSE)));
    let reask = reqs[1].last_user_text().unwrap();
    assert!(reask.contains(REASK), "{reask}");
    assert!(
        reask.contains("starts with text, not a JSON value"),
        "{reask}"
    );
}

fn failed_over_to_a_model_that_conforms(v: &str) {
    let env = env_with_schema(v);
    env.llm.script("first", "*", vec![Behaviour::text(WRONG)]);
    env.llm.script("second", "*", vec![Behaviour::text(GOOD)]);
    let out = env.run(args(&["--json", "Review the diff."]));
    out.assert_success();
    let j = out.json();
    assert_eq!(j["model"]["provider"], "second", "{}", out.dump());
    assert_eq!(classes(&j), ["schema", "schema", "ok"], "{}", out.dump());
    assert!(
        j["attempts"][1]["error"]
            .as_str()
            .unwrap()
            .contains("\"maybe\" is not one of"),
        "{}",
        out.dump()
    );
    out.assert_stderr_contains("switch first/m → second/n (schema)");
    let reqs = env.llm.requests();
    let routes: Vec<&str> = reqs.iter().map(|r| r.route.as_str()).collect();
    assert_eq!(routes, ["first", "first", "second"], "{}", out.dump());
    // The next model gets the original conversation: the prompt alone, no failed answer or re-ask.
    let roles: Vec<&str> = reqs[2]
        .roles()
        .into_iter()
        .filter(|r| *r != "system" && *r != "developer")
        .collect();
    assert_eq!(roles, ["user"], "{}", out.dump());
    assert_eq!(reqs[2].last_user_text(), reqs[0].last_user_text());
    // No breaker: a model that cannot follow this schema is not a dead provider.
    let status = env.run(["--status", "--json"]).json();
    let row = status["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == "first/m")
        .cloned()
        .unwrap();
    assert_eq!(row["state"], "healthy", "{row}");
}

fn nobody_conforms(v: &str) {
    let env = env_with_schema(v);
    // A megabyte of nested arrays from one, prose then violating JSON from the other.
    let huge = format!("{}{}", "[".repeat(512 * 1024), "]".repeat(512 * 1024));
    env.llm.script("first", "*", vec![Behaviour::text(huge)]);
    env.llm.script(
        "second",
        "*",
        vec![Behaviour::text(PROSE), Behaviour::text(WRONG)],
    );
    let out = env.run(args(&["Review the diff."]));
    out.assert_code(1).assert_stdout_empty();
    out.assert_stderr_contains("\"maybe\" is not one of");
    env.llm.script(
        "first",
        "*",
        vec![Behaviour::text(format!(
            "{}{}",
            "[".repeat(512 * 1024),
            "]".repeat(512 * 1024)
        ))],
    );
    env.llm.script(
        "second",
        "*",
        vec![Behaviour::text(PROSE), Behaviour::text(WRONG)],
    );
    let out = env.run(args(&["--json", "Review the diff."]));
    out.assert_code(1);
    let j = out.json();
    assert_eq!(j["ok"], false);
    assert_eq!(j["answer"], Value::Null);
    assert_eq!(j["structured_output"], Value::Null);
    assert_eq!(classes(&j), ["schema"; 4], "{}", out.dump());
    assert!(
        j["attempts"][0]["error"]
            .as_str()
            .unwrap()
            .contains("deeper than 64 levels"),
        "{}",
        out.dump()
    );
    // The last validation errors and the last raw answer.
    let errors = j["schema_errors"].as_array().expect("schema_errors");
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("\"maybe\" is not one of")),
        "{}",
        out.dump()
    );
    assert_eq!(j["rejected_answer"], WRONG, "{}", out.dump());
    assert_eq!(j["retry"]["could_help"], false, "{}", out.dump());
}

fn bad_schema_files_are_refused_before_anything_is_sent(v: &str) {
    let env = TestEnv::new(v, &providers());
    let write = |name: &str, text: &str| std::fs::write(env.cwd.join(name), text).unwrap();
    write("not-json.json", "{\"type\": ");
    write("not-a-schema.json", r#"{"type": "strnig"}"#);
    write(
        "unsatisfiable.json",
        r#"{"type": "integer", "minimum": 10, "maximum": 5}"#,
    );
    write(
        "remote.json",
        r#"{"properties": {"a": {"$ref": "https://example.com/a.json"}}}"#,
    );
    write(
        "large.json",
        &format!("{{\"description\": \"{}\"}}", "x".repeat(300 * 1024)),
    );
    std::fs::create_dir(env.cwd.join("dir.json")).unwrap();
    for (file, phrase) in [
        (
            "missing.json",
            "--output-schema missing.json: file not found",
        ),
        ("dir.json", "--output-schema dir.json: not a regular file"),
        (
            "not-json.json",
            "--output-schema not-json.json: not JSON: EOF",
        ),
        ("not-a-schema.json", "not a valid JSON Schema"),
        ("unsatisfiable.json", "the schema accepts no JSON value"),
        ("remote.json", "not a valid JSON Schema"),
        ("large.json", "at most 256 KiB"),
    ] {
        let out = env.run(["--no-tools", "--output-schema", file, "hi"]);
        out.assert_fails_with(2, phrase).assert_stdout_empty();
        let out = env.run(["--json", "--no-tools", "--output-schema", file, "hi"]);
        out.assert_code(2);
        let j = out.json();
        assert_eq!(j["exit_code"], 2);
        assert!(
            j["error"].as_str().unwrap().contains(phrase),
            "{}",
            out.dump()
        );
        // A batch refuses the same way, before any job runs.
        let out = env.run_stdin(
            ["--no-tools", "--batch", "-", "--output-schema", file],
            b"{\"id\":1,\"prompt\":\"hi\"}\n",
        );
        out.assert_fails_with(2, phrase).assert_stdout_empty();
    }
    assert!(env.llm.requests().is_empty(), "nothing was sent");
}

fn a_batch_with_per_job_schemas(v: &str) {
    let env = env_with_schema(v);
    std::fs::write(
        env.cwd.join("list.json"),
        json!({"type": "array", "items": {"type": "string"}, "minItems": 1}).to_string(),
    )
    .unwrap();
    let jobs = br#"{"id":"a","prompt":"review job-a"}
{"id":"b","prompt":"list job-b","schema":"list.json"}
{"id":"c","prompt":"review job-c","schema":"missing.json"}
{"id":"d","prompt":"review job-d"}
{"id":"e","prompt":"review job-e"}
"#;
    // first/m follows the list schema, not the review one; second/n follows both.
    env.llm.script(
        "first",
        "*",
        vec![Behaviour::by_prompt(
            [
                ("job-a", Behaviour::text(GOOD)),
                ("job-b", Behaviour::text(r#"["x", "y"]"#)),
            ],
            Behaviour::text(WRONG),
        )],
    );
    env.llm.script("second", "*", vec![Behaviour::text(GOOD)]);
    let out = env.run_stdin(
        [
            "--no-tools",
            "--provider",
            "first",
            "--model",
            "m",
            "--jobs",
            "1",
            "--batch",
            "-",
            "--output-schema",
            "review.json",
        ],
        jobs,
    );
    out.assert_code(2);
    let lines = out.json_lines();
    let by_id = |id: &str| lines.iter().find(|l| l["id"] == id).cloned().expect(id);
    let a = by_id("a");
    assert_eq!(a["structured_output"]["risk"], "low", "{}", out.dump());
    let b = by_id("b");
    assert_eq!(b["structured_output"], json!(["x", "y"]), "{}", out.dump());
    let c = by_id("c");
    assert_eq!(c["exit_code"], 2, "{}", out.dump());
    assert!(
        c["error"]
            .as_str()
            .unwrap()
            .contains("missing.json: file not found"),
        "{c}"
    );
    // Not permanent: `--resume` reads the file again (fixing it costs nothing to try).
    assert_eq!(c["permanent"], false);
    let d = by_id("d");
    assert_eq!(d["model"]["provider"], "second", "{}", out.dump());
    assert_eq!(classes(&d), ["schema", "schema", "ok"]);
    // Remembered for the rest of the batch: job e starts on the model that follows the schema.
    let e = by_id("e");
    assert_eq!(e["model"]["provider"], "second", "{}", out.dump());
    assert_eq!(classes(&e), ["ok"], "{}", out.dump());
    let asked: Vec<(String, String)> = env
        .llm
        .requests()
        .iter()
        .map(|r| {
            (
                r.route.clone(),
                r.last_user_text().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        !asked.iter().any(|(_, t)| t.contains("job-c")),
        "nothing sent for c"
    );
    assert!(
        !asked
            .iter()
            .any(|(route, t)| route == "first" && t.contains("job-e")),
        "{asked:?}"
    );
    // The per-job schema is what the model was told.
    let told_b = asked.iter().find(|(_, t)| t.contains("job-b")).unwrap();
    assert!(told_b.1.contains("\"minItems\":1"), "{told_b:?}");
    // The summary counts non-conforming answers per model.
    out.assert_stderr_contains("schema: 2 non-conforming answers (first/m 2)");
}

fn explain_says_a_schema_is_in_force(v: &str) {
    let env = env_with_schema(v);
    let out = env.run(args(&["--explain", "Review the diff."]));
    out.assert_success();
    out.assert_stdout_contains("output schema: review.json (draft 2020-12)");
    out.assert_stdout_contains("told to the model: appended to the prompt");
    let out = env.run(args(&["--explain", "--json", "Review the diff."]));
    let j = out.json();
    assert_eq!(j["output_schema"]["file"], "review.json", "{}", out.dump());
    assert_eq!(j["output_schema"]["draft"], "2020-12");
    assert!(env.llm.requests().is_empty());
}

/// A conforming value in an answer cut off at the output limit is still a truncated answer:
/// the next candidate is asked, and its value is printed.
fn a_truncated_conforming_answer_is_not_taken(v: &str) {
    let env = env_with_schema(v);
    env.llm
        .script("first", "*", vec![Behaviour::Truncated(GOOD.into()); 2]);
    env.llm.script(
        "second",
        "*",
        vec![Behaviour::text(r#"{"risk":"high","summary":"b"}"#)],
    );
    let out = env.run(args(&[
        "--models",
        "first/m,second/n",
        "--json",
        "Review the diff.",
    ]));
    let j = out.json();
    assert_eq!(
        j["structured_output"],
        json!({"risk": "high", "summary": "b"}),
        "{}",
        out.dump()
    );
}

both_versions!(
    a_truncated_conforming_answer_is_not_taken,
    conforming_the_first_time,
    fixed_on_the_reask,
    failed_over_to_a_model_that_conforms,
    nobody_conforms,
    bad_schema_files_are_refused_before_anything_is_sent,
    a_batch_with_per_job_schemas,
    explain_says_a_schema_is_in_force,
);
