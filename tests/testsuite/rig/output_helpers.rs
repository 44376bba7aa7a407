//! `support::Output`'s assertion helpers: each passes on the right output and fails on the wrong.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::*;

fn out(code: i32, stdout: &str, stderr: &str) -> Output {
    Output {
        code,
        stdout: stdout.into(),
        stderr: stderr.into(),
        elapsed: Duration::from_millis(250),
    }
}

/// The panic message of `f`, which must panic.
fn fails(f: impl FnOnce()) -> String {
    let e = catch_unwind(AssertUnwindSafe(f)).expect_err("the assertion did not fail");
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn output_assertions_pass_and_fail() {
    let ok = out(
        0,
        "The answer.\n",
        "switch a/m → b/m (quota)\nswitch b/m → c/m (auth)\n",
    );
    ok.assert_success()
        .assert_answer("The answer.")
        .assert_stdout_eq("The answer.\n")
        .assert_stdout_lacks("partial")
        .assert_stderr_lacks("panicked")
        .assert_stderr_count("switch ", 2)
        .assert_no_panic()
        .assert_elapsed_at_most(Duration::from_secs(1));
    assert_eq!(
        ok.stderr_lines(),
        ["switch a/m → b/m (quota)", "switch b/m → c/m (auth)"]
    );
    let m = fails(|| {
        ok.assert_answer("The answer");
    });
    assert!(
        m.contains("unexpected stdout") && m.contains("--- stderr ---"),
        "{m}"
    );
    fails(|| {
        ok.assert_stdout_empty();
    });
    fails(|| {
        ok.assert_stdout_lacks("answer");
    });
    let m = fails(|| {
        ok.assert_stderr_lacks("quota");
    });
    assert!(m.contains("stderr contains \"quota\""), "{m}");
    let m = fails(|| {
        ok.assert_stderr_count("switch ", 1);
    });
    assert!(m.contains("2 times, expected 1"), "{m}");
    fails(|| {
        ok.assert_elapsed_at_most(Duration::from_millis(100));
    });

    let usage = out(2, "", "pi-ccswitch-run: unknown option --frob\n");
    usage.assert_fails_with(2, "unknown option --frob");
    fails(|| {
        usage.assert_fails_with(1, "unknown option");
    });
    fails(|| {
        out(2, "x\n", "unknown option").assert_fails_with(2, "unknown option");
    });

    let panicked = out(
        101,
        "",
        "thread 'main' panicked at src/x.rs:1:1:\nboom\nnote: run with `RUST_BACKTRACE=1`\n",
    );
    fails(|| {
        panicked.assert_no_panic();
    });
    fails(|| {
        out(101, "", "").assert_no_panic();
    });
    fails(|| {
        out(2, "", "thread 'tokio' panicked at x").assert_no_panic();
    });

    // JSON and JSON lines.
    assert_eq!(out(0, "{\"a\": 1}\n", "").json(), json!({"a": 1}));
    fails(|| {
        out(0, "{\"a\": 1}\n{}\n", "").json();
    });
    assert_eq!(
        out(0, "{\"i\":0}\n{\"i\":1}\n", "").json_lines(),
        [json!({"i": 0}), json!({"i": 1})]
    );
    assert!(out(0, "", "").json_lines().is_empty());
    let m = fails(|| {
        out(0, "{\"i\":0}\nnope\n", "").json_lines();
    });
    assert!(m.contains("stdout line 2 is not JSON"), "{m}");
    fails(|| {
        out(0, "{\"i\":0}\n\n", "").json_lines();
    });
    fails(|| {
        out(0, "{\"i\":0}", "").json_lines();
    });
}
