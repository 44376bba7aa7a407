//! What a model's answer may carry to the user (issue 29, items 4 and 10), through real Pi and
//! the fault server: the runner's own keys (from models.json, the environment and `!command`
//! values) are masked in the answer on stdout, in `--json` and in batch results, and nothing
//! else in it is touched; an answer of invisible characters only is an empty answer; terminal
//! escape sequences never reach a terminal, and reach a pipe unchanged.

use crate::support::*;

const FILE_KEY: &str = "Fk3Lq8Zt1Vw6Mb9Xc2Nr5Jh7";
const ENV_KEY: &str = "Ev4Rp7Ks2Wd9Gt1Hm6Qz3Lb8";
const CMD_KEY: &str = "Cm5Tn8Pj3Xf6Kv1Rw9Bz4Hs2";

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("file", "file", vec![ModelSpec::text("m")]).api_key(FILE_KEY),
        ProviderSpec::new("env", "env", vec![ModelSpec::text("m")]).api_key_env("ANSWER_TEST_KEY"),
        ProviderSpec::new("cmd", "cmd", vec![ModelSpec::text("m")])
            .api_key_command(&format!("echo {CMD_KEY}")),
    ]
}

/// Kept as written: text that looks like keys but is not one the runner knows.
const LOOKALIKES: &str = "Example: sk-test-0000000000000000000000 and commit \
                          3f9c2a7e1b8d4c6f0a5e9b2d7c1f4a8e; Authorization: Bearer <token>";

fn answer_text() -> String {
    format!(
        "The config holds apiKey {FILE_KEY}, the variable holds {ENV_KEY} and the command \
         prints {CMD_KEY}. {LOOKALIKES}"
    )
}

fn masked_text() -> String {
    format!(
        "The config holds apiKey [redacted], the variable holds [redacted] and the command \
         prints [redacted]. {LOOKALIKES}"
    )
}

#[track_caller]
fn no_key(what: &str, text: &str) {
    for key in [FILE_KEY, ENV_KEY, CMD_KEY] {
        assert!(!text.contains(key), "{what} leaks {key}:\n{text}");
    }
}

fn known_keys_are_masked_in_answers(v: &str) {
    let mut env = TestEnv::new(v, &providers());
    env.env("ANSWER_TEST_KEY", ENV_KEY);
    env.llm
        .script("file", "*", vec![Behaviour::text(answer_text()); 3]);
    let run = ["--no-tools", "--provider", "file", "--model", "m"];

    let out = env.run(run.iter().copied().chain(["Show the config."]));
    out.assert_success()
        .assert_stdout_eq(&format!("{}\n", masked_text()));
    no_key("stdout", &out.stdout);

    let out = env.run(run.iter().copied().chain(["--json", "Show the config."]));
    out.assert_success();
    assert_eq!(out.json()["answer"], masked_text(), "{}", out.dump());

    let results = env.dir.path().join("results.jsonl");
    let results_arg = results.to_string_lossy().into_owned();
    let out = env.run_stdin(
        run.iter()
            .copied()
            .chain(["--batch", "-", "--output", &results_arg]),
        br#"{"id":"a","prompt":"Show the config."}"#,
    );
    out.assert_success();
    no_key("batch stdout", &out.stdout);
    let written = std::fs::read_to_string(&results).expect("results file");
    no_key("results file", &written);
    let line: serde_json::Value =
        serde_json::from_str(written.lines().next().expect("a line")).expect("json");
    assert_eq!(line["answer"], masked_text(), "{written}");
}

/// U+200B, NUL and a BOM alone are no answer: exit 2 like whitespace only (the last candidate).
fn invisible_answers_are_empty(v: &str) {
    for text in [
        "\u{200b}",
        "\u{0}",
        "\u{feff}",
        "\u{feff}\u{200b} \u{200b}\n",
    ] {
        let env = TestEnv::new(
            v,
            &[ProviderSpec::new("p", "p", vec![ModelSpec::text("m")])],
        );
        env.llm.script("p", "*", vec![Behaviour::text(text); 4]);
        let out = env.run(["--no-tools", "--provider", "p", "--model", "m", "Say it."]);
        out.assert_fails_with(2, "empty answer")
            .assert_stdout_empty();
    }
}

const ESCAPES: &str = "plain \u{1b}[31mred\u{1b}[0m \u{1b}]0;owned title\u{7}end\u{1b}[2J\rover";

/// On a terminal the answer loses its escape sequences; to a pipe it is as the model wrote it.
fn terminal_escapes_never_reach_a_terminal(v: &str) {
    let env = TestEnv::new(
        v,
        &[ProviderSpec::new("p", "p", vec![ModelSpec::text("m")])],
    );
    env.llm.script("p", "*", vec![Behaviour::text(ESCAPES); 2]);
    let args = ["--no-tools", "--provider", "p", "--model", "m", "Say it."];
    let piped = env.run(args);
    piped
        .assert_success()
        .assert_stdout_eq(&format!("{ESCAPES}\n"));

    // `script` gives the binary a pseudo-terminal as stdout and copies what it shows.
    let line = format!("{} 2>/dev/null", env.shell_line(args));
    let shown = run_command(
        env.other_cmd("script", ["-qec", &line, "/dev/null"]),
        None,
        RUN_TIMEOUT,
    );
    shown.assert_success();
    let screen = shown.stdout.replace("\r\n", "\n");
    assert_eq!(screen, "plain red endover\n", "{}", shown.dump());
    assert!(!shown.stdout.contains('\u{1b}'), "{}", shown.dump());
}

both_versions!(
    known_keys_are_masked_in_answers,
    invisible_answers_are_empty,
    terminal_escapes_never_reach_a_terminal,
    known_keys_are_masked_in_schema_answers,
);

/// A key inside a schema answer is masked on stdout, in `structured_output` and in
/// `rejected_answer`, like in any answer.
fn known_keys_are_masked_in_schema_answers(v: &str) {
    let env = TestEnv::new(v, &providers());
    std::fs::write(
        env.cwd.join("s.json"),
        r#"{"type":"object","required":["note"],"properties":{"note":{"type":"string"}}}"#,
    )
    .unwrap();
    let good = format!("{{\"note\": \"apiKey {FILE_KEY}\"}}");
    env.llm
        .script("file", "*", vec![Behaviour::text(good.clone()); 2]);
    let run = [
        "--no-tools",
        "--provider",
        "file",
        "--model",
        "m",
        "--output-schema",
        "s.json",
    ];
    let out = env.run(run.iter().copied().chain(["Show the config."]));
    out.assert_success();
    no_key("schema stdout", &out.stdout);
    let out = env.run(run.iter().copied().chain(["--json", "Show the config."]));
    out.assert_success();
    no_key("schema --json", &out.stdout);
    let bad = format!("{{\"nope\": \"apiKey {FILE_KEY}\"}}");
    env.llm.script("file", "*", vec![Behaviour::text(bad); 2]);
    let out = env.run(run.iter().copied().chain(["--json", "Show the config."]));
    out.assert_code(1);
    no_key("schema rejected --json", &out.stdout);
    no_key("schema rejected stderr", &out.stderr);
}
