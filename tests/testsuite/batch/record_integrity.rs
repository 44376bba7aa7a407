//! What decides that a job is done, or a line is a job, cannot be fooled: a complete result
//! without its newline is kept (not paid for again), a forged success is not trusted, a field
//! given twice is refused, a byte-order mark on a later line is skipped, and ids whose public
//! FNV hash collides are still two jobs.

use serde_json::Value;

use crate::support::batch::*;
use crate::support::*;

/// Two file-name-shaped ids with the same FNV-1a 64 (the shard hash): 0x9418fc7e2216fcd0.
const COLLIDING: [&str; 2] = ["doc-d831c0ba600f3b28.md", "doc-60f8a289aa18ee04.md"];

fn batch(env: &TestEnv, jobs: &str, extra: &[&str]) -> Output {
    let mut args: Vec<&str> = FROM_PRIM.to_vec();
    args.extend(["--batch", jobs, "--jobs", "1"]);
    args.extend(extra);
    env.run(&args)
}

fn line(id: &str, prompt: &str) -> String {
    serde_json::json!({"id": id, "prompt": prompt}).to_string() + "\n"
}

/// `--resume` keeps a complete last result that only lacks its newline, adds the newline and
/// does not pay for the job again.
#[test]
fn a_complete_result_without_its_newline_is_not_paid_twice() {
    let env = TestEnv::new(PI_NEWEST, &providers());
    let jobs = write_file(&env, "jobs.jsonl", &jobs(2));
    let out_path = env.dir.path().join("results.jsonl");
    let out = out_path.to_str().expect("path");
    batch(&env, &jobs, &["--output", out]).assert_success();
    assert_eq!(env.llm.requests().len(), 2);
    // An editor saves the file without its final newline.
    let text = std::fs::read_to_string(&out_path).expect("results");
    std::fs::write(&out_path, text.trim_end_matches('\n')).expect("rewrite");
    env.llm.clear_requests();
    let run = batch(&env, &jobs, &["--output", out, "--resume"]);
    run.assert_success()
        .assert_stderr_contains("the last result lacked its newline; added it");
    assert!(env.llm.requests().is_empty(), "{}", run.dump());
    assert_eq!(successes(&read_results(&out_path)).len(), 2);
}

/// A line claiming success without an answer (forged, or from another tool) does not mark
/// its job as done: `--resume` runs it.
#[test]
fn a_forged_success_is_not_trusted() {
    let env = TestEnv::new(PI_NEWEST, &providers());
    let jobs = write_file(&env, "jobs.jsonl", &line("g3", "Summarise document 3."));
    let out_path = env.dir.path().join("results.jsonl");
    std::fs::write(
        &out_path,
        "{\"id\":\"g3\",\"ok\":true,\"exit_code\":2,\"input_hash\":\"0000000000000000\"}\n",
    )
    .expect("forged");
    let run = batch(
        &env,
        &jobs,
        &["--output", out_path.to_str().expect("path"), "--resume"],
    );
    run.assert_success()
        .assert_stderr_contains("ignored 1 line(s) that are not results");
    assert_eq!(env.llm.requests().len(), 1, "{}", run.dump());
}

/// `{"id":"a","id":"b",…}` is an invalid line (exit 2, nothing sent for it), like an unknown
/// field; the other jobs run.
#[test]
fn a_field_given_twice_is_an_invalid_line() {
    let env = TestEnv::new(PI_NEWEST, &providers());
    let text = format!(
        "{}{{\"id\":\"a\",\"id\":\"b\",\"prompt\":\"Summarise document 1.\"}}\n",
        line("doc-0", "Summarise document 0.")
    );
    let jobs = write_file(&env, "jobs.jsonl", &text);
    let out = batch(&env, &jobs, &[]);
    out.assert_code(2);
    let results = out.json_lines();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["ok"], true);
    assert_eq!(results[1]["id"], Value::Null);
    let error = results[1]["error"].as_str().expect("error");
    assert!(
        error.starts_with("input line 2: field \"id\" is given twice"),
        "{error}"
    );
    assert_eq!(env.llm.requests().len(), 1, "only the valid job was sent");
}

/// `cat a.jsonl b.jsonl` of files written on Windows: the BOM at the start of the second
/// file's first line is skipped as on the first line.
#[test]
fn a_byte_order_mark_on_a_later_line_is_skipped() {
    let env = TestEnv::new(PI_NEWEST, &providers());
    let bom = "\u{feff}";
    let text = format!(
        "{bom}{}{bom}{}",
        line("doc-0", "Summarise document 0."),
        line("doc-1", "Summarise document 1.")
    );
    let jobs = write_file(&env, "jobs.jsonl", &text);
    let out = batch(&env, &jobs, &[]);
    out.assert_success();
    assert!(out.json_lines().iter().all(|r| r["ok"] == true));
    assert_eq!(env.llm.requests().len(), 2);
}

/// Ids are told apart by a keyed hash, not by their public FNV: two ids that collide under FNV
/// are two jobs (0.2.0 refused the second as a duplicate), and resuming one leaves the other
/// to run.
#[test]
fn ids_with_colliding_fnv_hashes_are_two_jobs() {
    let env = TestEnv::new(PI_NEWEST, &providers());
    let text = format!(
        "{}{}",
        line(COLLIDING[0], "Summarise document 0."),
        line(COLLIDING[1], "Summarise document 1.")
    );
    let jobs = write_file(&env, "jobs.jsonl", &text);
    let out = batch(&env, &jobs, &[]);
    out.assert_success();
    assert_eq!(env.llm.requests().len(), 2, "{}", out.dump());

    // Resuming: only the first is recorded; the second must still run.
    let first = write_file(
        &env,
        "first.jsonl",
        &line(COLLIDING[0], "Summarise document 0."),
    );
    let out_path = env.dir.path().join("results.jsonl");
    let out_file = out_path.to_str().expect("path");
    batch(&env, &first, &["--output", out_file]).assert_success();
    env.llm.clear_requests();
    batch(&env, &jobs, &["--output", out_file, "--resume"]).assert_success();
    let sent = env.llm.requests();
    assert_eq!(sent.len(), 1, "the victim job runs");
    assert_eq!(sent[0].last_user_text(), Some("Summarise document 1."));
}
