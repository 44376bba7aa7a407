//! What `--resume` runs again, night after night (issue 21): a job whose failure is in its
//! input itself (a binary report, one too large for every model, an invalid line) is not tried
//! again until the input changes, unless `--retry-failed`; a report edited after its answer
//! gets a new one with `--rerun-changed` (and keeps the old one without it).

use serde_json::{Value, json};

use crate::support::batch::*;
use crate::support::*;

fn night(env: &TestEnv, jobs: &str, out: &str, extra: &[&str]) -> Output {
    let mut args: Vec<&str> = FROM_PRIM.to_vec();
    args.extend(["--batch", jobs, "--jobs", "1", "--output", out, "--resume"]);
    args.extend(extra);
    env.run(&args)
}

fn small_window() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("prim", "a", vec![ModelSpec::text("m").context(1000)]),
        ProviderSpec::new("back", "b", vec![ModelSpec::text("m").context(1000)]),
    ]
}

#[test]
fn failures_in_the_input_are_not_retried_every_night() {
    let env = TestEnv::new(PI_NEWEST, &small_window());
    let binary = write_file(&env, "scan.md", "PK\u{3}\u{4}\0\0binary");
    let huge = write_file(&env, "huge.md", &"word ".repeat(2000));
    let fine = write_file(&env, "fine.md", "Q3 revenue grew.");
    let lines = [
        json!({"id": "bin", "prompt": "Summarise document 1.", "files": [&binary]}).to_string(),
        json!({"id": "huge", "prompt": "Summarise document 2.", "files": [&huge]}).to_string(),
        json!({"id": "fine", "prompt": "Summarise document 3.", "files": [&fine]}).to_string(),
        r#"{"id":"bad","promt":"typo"}"#.to_string(),
    ];
    let jobs = write_file(&env, "jobs.jsonl", &(lines.join("\n") + "\n"));
    let out_path = env.dir.path().join("results.jsonl");
    let out = out_path.to_str().expect("path");

    let first = night(&env, &jobs, out, &[]);
    first.assert_code(2);
    let results = read_results(&out_path);
    let by_id = |id: &str| -> Value {
        results
            .iter()
            .rev()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(by_id("bin")["permanent"], true, "{results:?}");
    assert_eq!(by_id("huge")["permanent"], true);
    assert_eq!(by_id("huge")["exit_code"], 1);
    assert_eq!(by_id("bad")["permanent"], true);
    assert_eq!(by_id("fine")["ok"], true);
    assert_eq!(by_id("fine")["permanent"], false);
    assert_eq!(by_id("fine")["attachments"][0]["file"], fine.as_str());
    assert_eq!(
        by_id("fine")["attachments"][0]["sha256"]
            .as_str()
            .map(str::len),
        Some(64)
    );
    // The huge job failed at once: no model could ever take it, nothing was sent for it.
    assert_eq!(env.llm.requests().len(), 1, "only the fine job was sent");
    let lines_after_first = results.len();

    // Night 2: nothing to do, nothing written, and the exit still says not all is well.
    env.llm.clear_requests();
    let second = night(&env, &jobs, out, &[]);
    second.assert_code(2).assert_stderr_contains(
        "3 not run again (they failed before in their unchanged input; --retry-failed runs them)",
    );
    assert!(env.llm.requests().is_empty());
    assert_eq!(
        read_results(&out_path).len(),
        lines_after_first,
        "no new lines"
    );

    // The binary report is replaced by a real one: it runs again.
    std::fs::write(&binary, "A readable report.").expect("rewrite");
    let third = night(&env, &jobs, out, &[]);
    third.assert_code(2);
    assert_eq!(env.llm.requests().len(), 1, "{}", third.dump());
    assert_eq!(successes(&read_results(&out_path)).get("bin"), Some(&1));

    // --retry-failed tries the rest again.
    env.llm.clear_requests();
    let fourth = night(&env, &jobs, out, &["--retry-failed"]);
    fourth.assert_code(2);
    let added: Vec<Value> = read_results(&out_path)
        .into_iter()
        .skip(lines_after_first + 1)
        .collect();
    assert_eq!(added.len(), 2, "huge and bad reported again: {added:?}");
}

#[test]
fn edited_reports_get_new_summaries_with_rerun_changed() {
    let env = TestEnv::new(PI_NEWEST, &providers());
    let report = write_file(&env, "r.md", "Version one.");
    let jobs = write_file(
        &env,
        "jobs.jsonl",
        &format!(
            "{}\n",
            json!({"id": "r", "prompt": "Summarise document 1.", "files": [&report]})
        ),
    );
    let out_path = env.dir.path().join("results.jsonl");
    let out = out_path.to_str().expect("path");
    night(&env, &jobs, out, &[]).assert_success();
    std::fs::write(&report, "Version two, edited.").expect("edit");
    env.llm.clear_requests();
    night(&env, &jobs, out, &[]).assert_success();
    assert!(
        env.llm.requests().is_empty(),
        "without the flag the recorded answer stands"
    );
    night(&env, &jobs, out, &["--rerun-changed"]).assert_success();
    let sent = env.llm.requests();
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0]
            .last_user_text()
            .is_some_and(|t| t.contains("Version two, edited.")),
        "{sent:?}"
    );
    // Unchanged since: not again.
    env.llm.clear_requests();
    night(&env, &jobs, out, &["--rerun-changed"]).assert_success();
    assert!(env.llm.requests().is_empty());
}
