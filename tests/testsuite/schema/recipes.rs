//! README's schema recipes, run as written: `examples/review-annotations.sh` (a CI step that
//! turns a review into GitHub annotations) and `examples/report-records.sh` (a batch that writes
//! one record per report). Each command line is taken from README (both languages show the same
//! line) and run with `sh -c` under `env -i` (PATH with the runner, Pi, Node and the system's
//! jq; the agent dir; README's keys), in a workspace whose `examples/` is the repository's, against
//! real Pi and the fault server set up as README's "Set up providers".

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::batch::*;
use crate::support::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The one line of a ```sh block in README that starts with `command`; both READMEs must show
/// it the same.
fn readme_line(command: &str) -> String {
    let find = |file: &str| {
        let text = std::fs::read_to_string(Path::new(ROOT).join(file)).expect(file);
        let mut found = None;
        let mut in_sh = false;
        for line in text.lines() {
            if line.starts_with("```") {
                in_sh = line == "```sh";
                continue;
            }
            if in_sh && line.starts_with(command) {
                assert!(found.is_none(), "{file} shows `{command}` twice");
                found = Some(line.to_string());
            }
        }
        found.unwrap_or_else(|| panic!("{file} shows no `{command}` line in a sh block"))
    };
    let en = find("README.md");
    assert_eq!(
        en,
        find("README.zh-CN.md"),
        "both READMEs show the same line"
    );
    en
}

/// A workspace whose `examples/` is the repository's (so what runs is exactly what README shows).
fn workspace(env: &TestEnv) -> PathBuf {
    let dir = env.dir.path().join("workspace");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("examples");
    if !link.exists() {
        std::os::unix::fs::symlink(Path::new(ROOT).join("examples"), link).unwrap();
    }
    dir
}

/// `line` as a CI runner or a shell script would run it: `sh -c`, nothing inherited but PATH
/// (the runner, Pi and Node, then the system's tools), HOME, the agent dir and the keys.
fn run_line(env: &TestEnv, dir: &Path, line: &str) -> Output {
    let mut path = bin_dir(env).into_os_string();
    path.push(":/usr/bin:/bin");
    let mut cmd = Command::new("/usr/bin/env");
    cmd.arg("-i")
        .arg(format!("PATH={}", path.to_string_lossy()))
        .arg(format!("HOME={}", env.home.display()))
        .arg(format!("PI_CODING_AGENT_DIR={}", env.agent_dir.display()))
        .arg(format!("PCCR_TEST_MARKER={}", env.marker()))
        // The test's, not README's: Pi 1.6.0 would fetch its built-in deepseek catalogue.
        .arg("PI_OFFLINE=1");
    for (k, v) in README_KEYS {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.args(["sh", "-c", line]).current_dir(dir);
    run_command(cmd, None, RUN_TIMEOUT)
}

fn readme_env(v: &str) -> TestEnv {
    let env = TestEnv::new(v, &readme_providers());
    write_readme_models_json(&env.agent_dir, &env.llm);
    env
}

const FINDINGS: &str = r#"```json
{"findings": [
  {"file": "src/a,b.rs", "line": 3, "severity": "error", "message": "off by one: 50%\nof the loop"},
  {"file": "src/c.rs", "line": 10, "severity": "notice", "message": "a clearer name helps"}
]}
```"#;

fn review_becomes_annotations(v: &str) {
    let env = readme_env(v);
    let dir = workspace(&env);
    std::fs::write(
        dir.join("review.diff"),
        "--- a/src/c.rs\n+++ b/src/c.rs\n@@\n-x\n+y\n",
    )
    .unwrap();
    let line = readme_line("examples/review-annotations.sh");
    assert_eq!(line, "examples/review-annotations.sh review.diff");
    // The primary answers in prose, then conforms when asked again.
    env.llm.script(
        "z",
        "*",
        vec![Behaviour::by_prompt(
            [("does not conform", Behaviour::text(FINDINGS))],
            Behaviour::text("Two problems: an off-by-one in src/a,b.rs and a name in src/c.rs."),
        )],
    );
    let out = run_line(&env, &dir, &line);
    out.assert_success();
    out.assert_stdout_eq(
        "::error file=src/a%2Cb.rs,line=3::off by one: 50%25%0Aof the loop\n\
         ::notice file=src/c.rs,line=10::a clearer name helps\n",
    );
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("review.json")).unwrap()).unwrap();
    assert_eq!(j["attempts"][0]["class"], "schema", "{j}");

    // A primary that never conforms: the backups are tried, and the annotations come from one.
    env.llm
        .script("z", "*", vec![Behaviour::text(r#"{"findings": "none"}"#)]);
    env.llm.script(
        "q",
        "*",
        vec![Behaviour::text(r#"{"findings": [{"file": "x.rs", "line": 1, "severity": "warning", "message": "ok"}]}"#)],
    );
    let out = run_line(&env, &dir, &line);
    out.assert_success()
        .assert_stdout_eq("::warning file=x.rs,line=1::ok\n");

    // Nobody conforms: one ::error line, and the runner's exit code.
    for route in ["q", "d", "builtin"] {
        env.llm
            .script(route, "*", vec![Behaviour::text("No findings.")]);
    }
    let out = run_line(&env, &dir, &line);
    out.assert_code(1);
    let stdout = out.stdout.trim_end();
    assert!(
        stdout.starts_with("::error::no review (exit 1): failover exhausted"),
        "{}",
        out.dump()
    );
    assert_eq!(stdout.lines().count(), 1, "{}", out.dump());
}

fn record(title: &str) -> Value {
    json!({"title": title, "date": "2026-12-01", "status": "on track", "points": ["one"]})
}

fn one_record_per_report(v: &str) {
    let env = readme_env(v);
    let dir = workspace(&env);
    let reports = dir.join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::write(reports.join("alpha.md"), "# Report Alpha\n").unwrap();
    std::fs::write(reports.join("beta.md"), "# Report Beta\n").unwrap();
    let line = readme_line("examples/report-records.sh");
    assert_eq!(line, "examples/report-records.sh reports records");
    // Beta's first answer has a date that is no date: asked again, it conforms.
    env.llm.script(
        "z",
        "*",
        vec![Behaviour::by_prompt(
            [
                ("Report Alpha", Behaviour::text(record("Alpha").to_string())),
                ("does not conform", Behaviour::text(record("Beta").to_string())),
                (
                    "Report Beta",
                    Behaviour::text(r#"{"title": "Beta", "date": "soon", "status": "on track", "points": ["one"]}"#),
                ),
            ],
            Behaviour::Status500,
        )],
    );
    let out = run_line(&env, &dir, &line);
    out.assert_success();
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("records").join(name)).unwrap())
            .unwrap()
    };
    assert_eq!(read("alpha.json"), record("Alpha"), "{}", out.dump());
    assert_eq!(read("beta.json"), record("Beta"), "{}", out.dump());
    let asked = env.llm.requests().len();
    assert_eq!(asked, 3, "alpha, beta, beta asked again");

    // Again: nothing is paid for twice.
    let out = run_line(&env, &dir, &line);
    out.assert_success();
    assert_eq!(env.llm.requests().len(), asked, "{}", out.dump());

    // An edited report gets a new record; the other keeps its own.
    std::fs::write(reports.join("alpha.md"), "# Report Alpha, revised\n").unwrap();
    env.llm.script(
        "z",
        "*",
        vec![Behaviour::text(record("Alpha 2").to_string())],
    );
    let out = run_line(&env, &dir, &line);
    out.assert_success();
    assert_eq!(read("alpha.json"), record("Alpha 2"), "{}", out.dump());
    assert_eq!(read("beta.json"), record("Beta"));
    assert_eq!(env.llm.requests().len(), asked + 1);
}

both_versions!(review_becomes_annotations, one_record_per_report);
