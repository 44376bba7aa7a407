//! The command line without Pi: grammar, usage errors (exit 2, nothing on stdout, Pi never
//! started), --help/--version, configuration errors and attachment errors.

use crate::support::fake_pi::{FakePi, fake_pi};
use crate::support::{RUN_TIMEOUT, run_command};

type Env = FakePi;

#[track_caller]
fn usage_error(env: &Env, args: &[&str], phrase: &str) {
    let out = env.run("ok", args);
    out.assert_code(2).assert_stderr_contains(phrase);
    out.check(
        out.stdout.is_empty(),
        "stdout must be empty on a usage error",
    );
    out.check(
        !env.pi_was_started(),
        "Pi must not be started on a usage error",
    );
    out.check(!out.stderr.contains("panicked"), "no panic");
}

#[test]
fn usage_errors_exit_2_and_name_the_argument() {
    let env = Env::new();
    usage_error(&env, &[], "a prompt is required");
    usage_error(&env, &["--bad", "hello"], "unsupported option: --bad");
    usage_error(&env, &["--bad", "--help"], "unsupported option: --bad");
    usage_error(&env, &["-", "hello"], "unsupported option: -");
    usage_error(&env, &["@", "hello"], "@file requires a path");
    usage_error(
        &env,
        &["--timeout-ms", "0", "hi"],
        "--timeout-ms must be a positive integer",
    );
    usage_error(
        &env,
        &["--timeout-ms", "1.5", "hi"],
        "--timeout-ms must be a positive integer",
    );
    usage_error(
        &env,
        &["--model", "--no-tools", "hi"],
        "--model requires a value",
    );
    usage_error(
        &env,
        &["--provider", "", "hi"],
        "--provider requires a value",
    );
    usage_error(&env, &["hi", "--thinking"], "--thinking requires a value");
    usage_error(&env, &["--task-complexity", "huge", "hi"], "huge");
    let out = env.run("ok", &["--bad", "x"]);
    assert!(
        out.stderr.starts_with("pi-ccswitch-run: "),
        "{}",
        out.dump()
    );
}

#[test]
fn help_and_version_go_to_stdout_with_exit_0() {
    let env = Env::new();
    let out = env.run("ok", &["--help"]);
    out.assert_success().assert_stdout_contains("Exit codes");
    out.assert_stdout_contains("--timeout-ms");
    out.check(out.stderr.is_empty(), "nothing on stderr");
    let out = env.run("ok", &["--version"]);
    out.assert_success();
    assert_eq!(
        out.stdout,
        format!("pi-ccswitch-run {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert!(!env.pi_was_started());
}

#[test]
fn double_dash_sends_flag_like_words_as_prompt_text() {
    let env = Env::new();
    let out = env.run("ok", &["--", "--help", "@x", "-v"]);
    out.assert_success();
    assert_eq!(out.stdout, "fake answer\n");
    let log = std::fs::read_to_string(env.log_path()).expect("pi log");
    assert!(log.contains(r#""message":"--help @x -v""#), "{log}");
}

#[test]
fn pi_bin_must_be_the_real_pi() {
    let env = Env::new();
    let out = run_command(
        {
            let mut c = env.cmd("ok", &["hello"]);
            c.env("PI_BIN", "/bin/bash");
            c
        },
        None,
        RUN_TIMEOUT,
    );
    out.assert_code(2)
        .assert_stderr_contains("PI_BIN must name the real pi executable");
    assert!(out.stdout.is_empty());
}

#[test]
fn legacy_pi_bin_falls_back_to_pi_on_path_with_a_warning() {
    let env = Env::new();
    let dir = fake_pi();
    let dir = dir.parent().expect("fixture dir");
    let mut cmd = env.cmd("ok", &["hello"]);
    cmd.env("PI_BIN", "pi-ccswitch-run")
        .env("PATH", format!("{}:/usr/bin:/bin", dir.display()));
    let out = run_command(cmd, None, RUN_TIMEOUT);
    out.assert_success()
        .assert_stderr_contains("legacy runner wrapper");
    assert_eq!(out.stdout, "fake answer\n");
}

#[test]
fn pi_not_found_is_a_clear_error_not_a_crash() {
    let env = Env::new();
    for pi_bin in ["/nonexistent/dir/pi", ""] {
        let mut cmd = env.cmd("ok", &["hello"]);
        cmd.env("PI_BIN", pi_bin).env("PATH", env.dir.path());
        let out = run_command(cmd, None, RUN_TIMEOUT);
        out.assert_code(2).assert_stderr_contains("was not found");
        out.check(!out.stderr.contains("panicked"), "no panic");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn bad_environment_values_are_config_errors() {
    let env = Env::new();
    for (var, value) in [
        ("CCSWITCH_ROUND_LIMIT_MS", "soon"),
        ("CCSWITCH_FIRST_RESPONSE_MS", "0"),
        ("CCSWITCH_STALL_MS", "-3"),
    ] {
        let mut cmd = env.cmd("ok", &["hello"]);
        cmd.env(var, value);
        let out = run_command(cmd, None, RUN_TIMEOUT);
        out.assert_code(2).assert_stderr_contains(var);
        assert!(!env.pi_was_started());
    }
}

#[test]
fn attachment_errors_exit_2_before_pi_starts() {
    let env = Env::new();
    std::fs::create_dir(env.path("adir")).expect("mkdir");
    std::fs::write(env.path("nul.bin"), b"abc\0def").expect("write");
    std::fs::write(env.path("latin1.txt"), b"caf\xe9\n").expect("write");
    std::fs::write(
        env.path("doc.pdf"),
        b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n",
    )
    .expect("write");
    let big = std::fs::File::create(env.path("big.txt")).expect("create");
    big.set_len(20 * 1024 * 1024 + 1).expect("grow");
    let cases = [
        ("@missing.txt", "file not found"),
        ("@adir", "not a regular text file"),
        ("@nul.bin", "binary files are not supported"),
        ("@latin1.txt", "not a UTF-8 text file"),
        ("@doc.pdf", "application/pdf"),
        ("@big.txt", "too large"),
    ];
    for (arg, phrase) in cases {
        let out = env.run("ok", &[arg, "summarise"]);
        out.assert_code(2).assert_stderr_contains(phrase);
        let abs = env.path(arg.trim_start_matches('@'));
        out.assert_stderr_contains(&abs.display().to_string());
        assert!(out.stdout.is_empty());
        assert!(!env.pi_was_started(), "{arg}: Pi must not start");
    }
}

#[test]
fn text_attachments_are_wrapped_in_order_and_empty_ones_skipped() {
    let env = Env::new();
    std::fs::write(env.path("a.md"), "\u{feff}alpha\n").expect("write");
    std::fs::write(env.path("empty.txt"), "").expect("write");
    std::fs::write(env.path("b.txt"), "beta").expect("write");
    let out = env.run("ok", &["@a.md", "@empty.txt", "@b.txt", "sum", "up"]);
    out.assert_success();
    let log = std::fs::read_to_string(env.log_path()).expect("pi log");
    let prompt_line = log
        .lines()
        .find(|l| l.contains(r#""type":"prompt""#))
        .expect("prompt");
    let v: serde_json::Value = serde_json::from_str(prompt_line).expect("json");
    let a = env.path("a.md");
    let b = env.path("b.txt");
    assert_eq!(
        v["message"],
        format!(
            "<file name=\"{}\">\nalpha\n\n</file>\n<file name=\"{}\">\nbeta\n</file>\n\nsum up",
            a.display(),
            b.display()
        )
    );
}

/// Issue 15: a mistyped flag gets a suggestion; a Unicode dash is not silently prompt text.
#[test]
fn mistyped_flags_and_unicode_dashes_are_usage_errors_with_a_suggestion() {
    let env = Env::new();
    usage_error(
        &env,
        &["--modle", "glm-4.6", "hello"],
        "unsupported option: --modle (did you mean --model?)",
    );
    for dash in ["\u{2014}model", "\u{2013}model", "\u{2212}model"] {
        usage_error(&env, &[dash, "glm-4.6", "hello"], "did you mean --model?");
    }
    // After `--` the same word is prompt text, sent as it is.
    let out = env.run("ok", &["--", "\u{2014}model", "x"]);
    out.assert_success();
    let log = std::fs::read_to_string(env.log_path()).expect("pi log");
    assert!(log.contains("\u{2014}model x"), "{log}");
}
