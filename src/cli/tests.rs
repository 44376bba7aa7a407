//! Unit tests of the command line grammar (`cli/`).

use super::*;

fn run(args: &[&str]) -> Result<Invocation, String> {
    let argv = std::iter::once("pi-ccswitch-run").chain(args.iter().copied());
    match parse(argv) {
        Ok(Parsed::Run(inv)) => Ok(*inv),
        Ok(Parsed::Info(text)) => Err(format!("INFO:{text}")),
        Err(e) => Err(e.0),
    }
}

#[test]
fn definition_is_consistent() {
    command().debug_assert();
}

#[test]
fn reference_shape() {
    let inv = run(&["--timeout-ms", "42", "--no-tools", "@input.md", "summarize"]).unwrap();
    assert_eq!(inv.timeout_ms, 42);
    assert_eq!(inv.pi_args(), vec!["--no-tools"]);
    assert_eq!(inv.files, vec!["input.md"]);
    assert_eq!(inv.prompt, "summarize");
}

#[test]
fn words_join_with_one_space_and_default_timeout() {
    let inv = run(&["say", "hello", "world"]).unwrap();
    assert_eq!(inv.prompt, "say hello world");
    assert_eq!(inv.timeout_ms, 600_000);
    assert!(inv.pi_args().is_empty());
}

#[test]
fn double_dash_makes_everything_prompt_text() {
    let inv = run(&["--no-tools", "--", "--help", "@x", "-v"]).unwrap();
    assert_eq!(inv.prompt, "--help @x -v");
    assert!(inv.files.is_empty());
    let inv = run(&["@a.txt", "--", "@b"]).unwrap();
    assert_eq!(inv.files, vec!["a.txt"]);
    assert_eq!(inv.prompt, "@b");
}

#[test]
fn usage_errors_name_the_argument() {
    assert_eq!(
        run(&["--bad", "x"]).unwrap_err(),
        "unsupported option: --bad"
    );
    assert_eq!(
        run(&["--bad", "--help"]).unwrap_err(),
        "unsupported option: --bad"
    );
    assert_eq!(run(&["-x", "hi"]).unwrap_err(), "unsupported option: -x");
    assert_eq!(
        run(&["-", "hi"]).unwrap_err(),
        "unsupported option: - (to attach standard input, write @-)"
    );
    assert_eq!(run(&["@", "hi"]).unwrap_err(), "@file requires a path");
    assert_eq!(run(&[]).unwrap_err(), "a prompt is required");
    assert_eq!(run(&["@only.txt"]).unwrap_err(), "a prompt is required");
    assert_eq!(run(&["--",]).unwrap_err(), "a prompt is required");
}

#[test]
fn timeout_must_be_a_positive_integer() {
    for bad in ["0", "-5", "1.5", "abc", "", "+5", "1e3", "0x10"] {
        let err = run(&["--timeout-ms", bad, "hi"]).unwrap_err();
        assert!(err.starts_with("--timeout-ms"), "{bad:?}: {err}");
    }
    assert!(run(&["--timeout-ms"]).unwrap_err().contains("--timeout-ms"));
    assert_eq!(
        run(&["--timeout-ms", "5", "--timeout-ms", "7", "hi"])
            .unwrap()
            .timeout_ms,
        7
    );
    assert_eq!(run(&["--timeout-ms=9", "hi"]).unwrap().timeout_ms, 9);
}

#[test]
fn wait_bounds_are_durations() {
    use std::time::Duration;
    let inv = run(&["--max-wait", "30s", "--prefer-primary=10m", "hi"]).unwrap();
    assert_eq!(inv.max_wait, Some(Duration::from_secs(30)));
    assert_eq!(inv.prefer_primary, Some(Duration::from_secs(600)));
    let inv = run(&["hi"]).unwrap();
    assert_eq!((inv.max_wait, inv.prefer_primary), (None, None));
    // The last one given wins, as for every value flag.
    let inv = run(&["--max-wait", "5m", "--max-wait", "0", "hi"]).unwrap();
    assert_eq!(inv.max_wait, Some(Duration::ZERO));
    assert_eq!(
        run(&["--max-wait", "30", "hi"]).unwrap_err(),
        "--max-wait expects a duration such as 30s, 10m or 1h30m (units d, h, m, s, ms; got '30')"
    );
    assert_eq!(
        run(&["--prefer-primary", "-1m", "hi"]).unwrap_err(),
        "--prefer-primary expects a duration such as 30s, 10m or 1h30m (units d, h, m, s, ms; \
         got '-1m')"
    );
    assert_eq!(
        run(&["--prefer-primary", "30d", "hi"]).unwrap_err(),
        "--prefer-primary is longer than a week (7d), the longest wait taken"
    );
    assert_eq!(
        run(&["hi", "--max-wait"]).unwrap_err(),
        "--max-wait requires a value"
    );
}

#[test]
fn forwarded_values_are_checked() {
    let inv = run(&[
        "--provider",
        "a",
        "--model",
        "m",
        "--thinking",
        "high",
        "--models",
        "a/*",
        "q",
    ])
    .unwrap();
    assert_eq!(
        inv.pi_args(),
        vec!["--provider", "a", "--model", "m", "--thinking", "high",]
    );
    // The runner resolves the scope itself; Pi never sees the patterns.
    assert_eq!(inv.models_scope.as_deref(), Some("a/*"));
    assert_eq!(
        run(&["--model", "", "q"]).unwrap_err(),
        "--model requires a value"
    );
    assert_eq!(
        run(&["--model", "--no-tools", "q"]).unwrap_err(),
        "--model requires a value"
    );
    assert_eq!(
        run(&["q", "--provider"]).unwrap_err(),
        "--provider requires a value"
    );
    assert_eq!(
        run(&["--model", "-x", "q"]).unwrap().pi_args(),
        vec!["--model", "-x"]
    );
}

#[test]
fn migration_flags_are_ignored() {
    let inv = run(&["-p", "--print", "--no-session", "--no-extensions", "hi"]).unwrap();
    assert!(inv.pi_args().is_empty());
    assert_eq!(inv.prompt, "hi");
}

#[test]
fn management_modes_take_no_prompt() {
    assert_eq!(
        run(&["--status"]).unwrap().mode,
        Mode::Manage(Manage::Status)
    );
    assert!(run(&["--status", "--json"]).unwrap().json);
    assert_eq!(
        run(&["--doctor"]).unwrap().mode,
        Mode::Manage(Manage::Doctor)
    );
    assert_eq!(
        run(&["--reactivate", "all"]).unwrap().mode,
        Mode::Manage(Manage::Reactivate(ManageTarget::All))
    );
    assert_eq!(
        run(&["--disable", "zai/glm-4.6"]).unwrap().mode,
        Mode::Manage(Manage::Disable("zai/glm-4.6".into()))
    );
    assert_eq!(
        run(&["--reset", "a/b/c"]).unwrap().mode,
        Mode::Manage(Manage::Reset(ManageTarget::Model("a/b/c".into())))
    );
    assert!(
        run(&["--disable", "all"])
            .unwrap_err()
            .contains("provider/model")
    );
    assert!(
        run(&["--reset", "nomodel"])
            .unwrap_err()
            .contains("provider/model or all")
    );
    assert!(
        run(&["--status", "hello"])
            .unwrap_err()
            .contains("take no prompt")
    );
    assert!(run(&["--status", "--doctor"]).is_err());
    // A prompt that looks like a management flag goes after `--`.
    let inv = run(&["--", "--status"]).unwrap();
    assert_eq!((inv.mode, inv.prompt.as_str()), (Mode::Run, "--status"));
}

#[test]
fn batch_mode() {
    let inv = run(&["--batch", "jobs.jsonl", "--jobs", "2", "--json"]).unwrap();
    let Mode::Batch(b) = inv.mode else {
        panic!("not batch")
    };
    assert_eq!((b.file.as_str(), b.jobs), ("jobs.jsonl", Some(2)));
    let Mode::Batch(b) = run(&["--batch", "-"]).unwrap().mode else {
        panic!("not batch")
    };
    assert_eq!(b.file, "-");
    assert!(
        run(&["--batch", "f", "hello"])
            .unwrap_err()
            .contains("job file")
    );
    assert!(
        run(&["--jobs", "2", "hello"]).is_err(),
        "--jobs needs --batch"
    );
    assert!(
        run(&["--batch", "f", "--jobs", "0"])
            .unwrap_err()
            .contains("--jobs must be")
    );
    assert!(run(&["--batch", "f", "--status"]).is_err());
}

#[test]
fn help_and_version_are_info() {
    assert!(run(&["--help"]).unwrap_err().starts_with("INFO:"));
    assert!(run(&["-h"]).unwrap_err().contains("Exit codes"));
    assert!(
        run(&["-V"])
            .unwrap_err()
            .contains(env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn numbers_are_digits_only_without_whitespace() {
    // Regression (issue 9): `--timeout-ms " 5000"` was accepted.
    for bad in [" 5000", "5000 ", "\t5", "5\n"] {
        let err = run(&["--timeout-ms", bad, "hi"]).unwrap_err();
        assert!(
            err.starts_with("--timeout-ms must be a positive integer"),
            "{bad:?}: {err}"
        );
    }
    assert_eq!(parse_decimal("007"), Some(7));
    assert_eq!(parse_decimal(" 7"), None);
}

#[test]
fn untrusted_document_flags_are_forwarded_with_value_checks() {
    let inv = run(&[
        "--system-prompt",
        "You summarise.",
        "--append-system-prompt",
        "Be brief.",
        "--append-system-prompt=Plain text only.",
        "--tools",
        "read,ls",
        "--exclude-tools=bash",
        "--no-builtin-tools",
        "--no-skills",
        "--no-context-files",
        "q",
    ])
    .unwrap();
    assert_eq!(
        inv.pi_args(),
        vec![
            "--no-builtin-tools",
            "--tools",
            "read,ls",
            "--exclude-tools",
            "bash",
            "--system-prompt",
            "You summarise.",
            "--append-system-prompt",
            "Be brief.",
            "--append-system-prompt",
            "Plain text only.",
            "--no-context-files",
            "--no-skills",
        ]
    );
    for flag in [
        "--system-prompt",
        "--append-system-prompt",
        "--tools",
        "--exclude-tools",
    ] {
        assert_eq!(
            run(&[flag, "", "q"]).unwrap_err(),
            format!("{flag} requires a value")
        );
        assert_eq!(
            run(&[flag, "--no-tools", "q"]).unwrap_err(),
            format!("{flag} requires a value")
        );
        assert_eq!(
            run(&["q", flag]).unwrap_err(),
            format!("{flag} requires a value")
        );
        assert_eq!(
            run(&[&format!("{flag}="), "q"]).unwrap_err(),
            format!("{flag} requires a value")
        );
    }
}

#[test]
fn mistyped_flags_get_a_suggestion() {
    assert_eq!(
        run(&["--modle", "x", "q"]).unwrap_err(),
        "unsupported option: --modle (did you mean --model?)"
    );
    assert_eq!(
        run(&["--timeout", "5", "q"]).unwrap_err(),
        "unsupported option: --timeout (did you mean --timeout-ms?)"
    );
}

#[test]
fn unicode_dashes_are_usage_errors_before_double_dash_only() {
    for (word, dash) in [
        ("\u{2014}model", "U+2014 EM DASH"),
        ("\u{2013}model", "U+2013 EN DASH"),
        ("\u{2212}model", "U+2212 MINUS SIGN"),
        ("\u{2014}\u{2014}model", "U+2014 EM DASH"),
    ] {
        let err = run(&[word, "x", "q"]).unwrap_err();
        assert!(err.contains(dash), "{err}");
        assert!(err.contains("did you mean --model?"), "{err}");
    }
    let err = run(&["\u{2013}\u{2013}no-tools", "q"]).unwrap_err();
    assert!(err.contains("did you mean --no-tools?"), "{err}");
    // Only flags that exist are suggested.
    let err = run(&["\u{2014}zzqqxx", "q"]).unwrap_err();
    assert!(!err.contains("--zzqqxx"), "{err}");
    assert!(err.contains("options start with ASCII '-'"), "{err}");
    let err = run(&["\u{2014}modle", "x", "q"]).unwrap_err();
    assert!(err.contains("did you mean --model"), "{err}");
    assert!(!err.contains("--modle"), "{err}");
    let err = run(&["\u{2014}timeout-ms=5", "q"]).unwrap_err();
    assert!(err.contains("did you mean --timeout-ms=5?"), "{err}");
    let err = run(&["\u{2014}v", "q"]).unwrap_err();
    assert!(err.contains("did you mean -v?"), "{err}");
    // After `--` it is prompt text; a dash inside prose is prose.
    assert_eq!(
        run(&["--", "\u{2014}model", "x"]).unwrap().prompt,
        "\u{2014}model x"
    );
    assert_eq!(
        run(&["2020\u{2013}2024", "\u{2014}", "fine"])
            .unwrap()
            .prompt,
        "2020\u{2013}2024 \u{2014} fine"
    );
}

#[test]
fn stdin_attachment_and_batch_flags() {
    assert_eq!(run(&["@-", "summarise"]).unwrap().files, vec!["-"]);
    assert!(
        run(&["@-", "@-", "q"])
            .unwrap_err()
            .contains("@- is given twice")
    );
    let inv = run(&[
        "--batch",
        "jobs.jsonl",
        "--output",
        "out.jsonl",
        "--resume",
        "--shard",
        "2/5",
    ])
    .unwrap();
    let Mode::Batch(b) = inv.mode else {
        panic!("not batch")
    };
    assert_eq!(b.output.as_deref(), Some(std::path::Path::new("out.jsonl")));
    assert!(b.resume);
    assert_eq!(b.shard, Some(Shard { index: 2, count: 5 }));
    for bad in ["3/3", "0/0", "1", "a/2", "-1/2", "1/-2", " 1/2", "1/2/3"] {
        let err = run(&["--batch", "f", "--shard", bad]).unwrap_err();
        assert!(err.starts_with("--shard expects I/N"), "{bad}: {err}");
    }
    // The message names the flag that needs the other one.
    assert_eq!(
        run(&["--batch", "f", "--resume"]).unwrap_err(),
        "--resume needs --output FILE: it skips the jobs that already have a success there"
    );
    assert!(
        run(&["--resume", "q"])
            .unwrap_err()
            .starts_with("--resume needs")
    );
    assert_eq!(
        run(&["--output=o", "q"]).unwrap_err(),
        "--output works only with --batch FILE"
    );
    assert_eq!(
        run(&["--shard", "0/2", "q"]).unwrap_err(),
        "--shard works only with --batch FILE"
    );
    assert_eq!(
        run(&["--jobs", "2", "q"]).unwrap_err(),
        "--jobs works only with --batch FILE"
    );
}

#[test]
fn output_schema_takes_a_file_for_runs_explain_and_batches() {
    let inv = run(&["--output-schema", "review.json", "review", "this"]).unwrap();
    assert_eq!(inv.output_schema, Some(PathBuf::from("review.json")));
    assert_eq!(inv.prompt, "review this");
    // Not forwarded to Pi: the runner tells the model itself.
    assert!(inv.pi_args().is_empty());
    let inv = run(&["--output-schema=s.json", "--explain", "hi"]).unwrap();
    assert_eq!(inv.mode, Mode::Explain);
    let inv = run(&["--batch", "jobs.jsonl", "--output-schema", "s.json"]).unwrap();
    assert!(matches!(inv.mode, Mode::Batch(_)));
    assert_eq!(inv.output_schema, Some(PathBuf::from("s.json")));
    assert_eq!(run(&["hi"]).unwrap().output_schema, None);
    for (args, want) in [
        (
            &["--output-schema", "", "hi"][..],
            "--output-schema requires a value",
        ),
        (
            &["--output-schema", "--json", "hi"],
            "--output-schema requires a value",
        ),
        (
            &["hi", "--output-schema"],
            "--output-schema requires a value",
        ),
        (
            &["--output-schema", "-", "hi"],
            "--output-schema takes a file",
        ),
        (
            &["--status", "--output-schema", "s.json"],
            "--output-schema applies to a run, --explain or --batch",
        ),
    ] {
        let err = run(args).unwrap_err();
        assert!(err.starts_with(want), "{args:?}: {err}");
    }
}

#[test]
fn explain_wait_and_health_url() {
    assert_eq!(run(&["--explain", "q"]).unwrap().mode, Mode::Explain);
    assert!(
        run(&["--explain", "--batch", "f"])
            .unwrap_err()
            .contains("--explain")
    );
    assert!(run(&["--explain", "--status"]).is_err());
    assert_eq!(run(&["--wait", "q"]).unwrap().wait, Some(true));
    assert_eq!(run(&["--no-wait", "q"]).unwrap().wait, Some(false));
    assert_eq!(run(&["q"]).unwrap().wait, None);
    assert_eq!(
        run(&["--health-url", "redis://:pw@127.0.0.1:6379/0", "q"])
            .unwrap()
            .health_url
            .as_deref(),
        Some("redis://:pw@127.0.0.1:6379/0")
    );
    assert!(
        run(&["--health-url", "http://x", "q"])
            .unwrap_err()
            .contains("redis://")
    );
    assert_eq!(
        run(&["--task-complexity", "HIGH", "q"]).unwrap_err(),
        "invalid value 'HIGH' for --task-complexity (expected auto, low, medium, high)"
    );
    assert_eq!(
        run(&["--task-complexity", "high", "q"])
            .unwrap()
            .task_complexity,
        Some(Complexity::High)
    );
}

#[test]
fn help_lists_every_environment_variable() {
    let help = command().render_help().to_string();
    for v in settings::ENVIRONMENT {
        // Each with its description, as generated from the table (words wrap, so compare
        // them with the whitespace folded).
        let folded = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        let entry = folded(&format!("{} {}", v.name, v.describe()));
        assert!(
            folded(&help).contains(&entry),
            "--help lacks {entry}:\n{help}"
        );
    }
    let section = help
        .lines()
        .skip_while(|l| *l != "Environment:")
        .take_while(|l| !l.is_empty());
    let mut entries = 0;
    for line in section {
        assert!(line.chars().count() <= 100, "too wide: {line}");
        entries += usize::from(!line.starts_with("   "));
    }
    assert_eq!(entries, 1 + settings::ENVIRONMENT.len(), "{help}");
}

#[test]
fn blank_prompt_words_are_no_prompt() {
    // Regression (found by `any_argv_parses_or_fails_cleanly`): `""` was a prompt of nothing.
    assert_eq!(run(&[""]).unwrap_err(), "a prompt is required");
    assert_eq!(run(&["  ", "\t"]).unwrap_err(), "a prompt is required");
    assert_eq!(
        run(&["@a.md", "--", " "]).unwrap_err(),
        "a prompt is required"
    );
    assert_eq!(run(&[" hi "]).unwrap().prompt, " hi ");
}

#[test]
fn usage_errors_stay_on_one_line() {
    // Regression (found by `any_argv_parses_or_fails_cleanly`): a value with a newline was
    // echoed raw, splitting the error over two lines.
    assert_eq!(
        run(&["--task-complexity", "\n", "q"]).unwrap_err(),
        "invalid value '\\n' for --task-complexity (expected auto, low, medium, high)"
    );
}

mod random_argv {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    use proptest::prelude::*;

    use super::super::*;

    /// Words that exercise the grammar: every flag, values, `@`, `--`, dashes of all kinds.
    fn word() -> impl Strategy<Value = OsString> {
        let flags: Vec<String> = command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .chain(
                [
                    "-", "--", "-v", "-vv", "-p", "@", "@-", "@x", "—model", "–", "−x",
                ]
                .map(String::from),
            )
            .collect();
        prop_oneof![
            proptest::sample::select(flags).prop_map(OsString::from),
            "[a-z0-9/=:,. *-]{0,12}".prop_map(OsString::from),
            any::<String>().prop_map(OsString::from),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(OsString::from_vec),
        ]
    }

    proptest! {
        #![proptest_config(crate::fuzz::config(3000))]

        /// Any argv gives a result or a one-line usage error — never a panic — and an
        /// accepted invocation is self-consistent.
        #[test]
        fn any_argv_parses_or_fails_cleanly(words in proptest::collection::vec(word(), 0..10)) {
            let argv = std::iter::once(OsString::from("pi-ccswitch-run")).chain(words);
            match parse(argv) {
                Ok(Parsed::Info(text)) => prop_assert!(!text.is_empty()),
                Ok(Parsed::Run(inv)) => {
                    prop_assert!(inv.timeout_ms > 0);
                    match &inv.mode {
                        Mode::Run | Mode::Explain => prop_assert!(!inv.prompt.is_empty()),
                        Mode::Batch(b) => {
                            prop_assert!(inv.prompt.is_empty() && inv.files.is_empty());
                            if let Some(s) = b.shard {
                                prop_assert!(s.index < s.count);
                            }
                            prop_assert!(!b.resume || b.output.is_some());
                        }
                        Mode::Manage(_) => prop_assert!(inv.prompt.is_empty()),
                    }
                    for v in inv.pi_args() {
                        prop_assert!(!v.is_empty());
                    }
                }
                Err(e) => {
                    prop_assert!(!e.0.is_empty());
                    prop_assert!(!e.0.contains('\n'), "one line: {:?}", e.0);
                }
            }
        }
    }
}

/// `--max-cost`: a total, provider caps, repeatable and comma-separated, for single runs and
/// batches; every bad value is a one-line usage error naming it.
#[test]
fn max_cost_takes_a_total_and_provider_caps() {
    let inv = run(&["--max-cost", "5", "--max-cost=zai=1.5,minimax=2", "hi"]).unwrap();
    assert_eq!(
        inv.budget,
        crate::budget::Caps::parse(&["5,zai=1.5,minimax=2".to_string()]).unwrap()
    );
    assert_eq!(
        inv.budget.providers().collect::<Vec<_>>(),
        ["minimax", "zai"]
    );
    assert!(inv.pi_args().is_empty(), "not Pi's flag");
    assert!(run(&["hi"]).unwrap().budget.is_empty());
    let batch = run(&["--batch", "jobs.jsonl", "--max-cost", "0.25"]).unwrap();
    assert!(matches!(batch.mode, Mode::Batch(_)));
    assert!(!batch.budget.is_empty());
    for (args, says) in [
        (
            vec!["--max-cost", "-1", "hi"],
            "--max-cost '-1': '-1' is not a positive amount",
        ),
        (
            vec!["--max-cost", "NaN", "hi"],
            "--max-cost 'NaN': 'NaN' is not a positive amount",
        ),
        (
            vec!["--max-cost", "inf", "hi"],
            "'inf' is not a positive amount",
        ),
        (
            vec!["--max-cost", "five", "hi"],
            "'five' is not a positive amount",
        ),
        (
            vec!["--max-cost", "0", "hi"],
            "'0' is not a positive amount",
        ),
        (
            vec!["--max-cost", "zai=", "hi"],
            "--max-cost 'zai=': '' is not a positive amount",
        ),
        (vec!["--max-cost", "=1", "hi"], "'=1' names no provider"),
        (vec!["--max-cost", "", "hi"], "--max-cost requires a value"),
        (vec!["--max-cost"], "--max-cost requires a value"),
        (
            vec!["--max-cost", "1,", "hi"],
            "--max-cost '1,' has an empty item",
        ),
        (
            vec!["--max-cost", "zai=1", "--max-cost", "zai=2", "hi"],
            "--max-cost gives provider 'zai' twice (zai=1 and zai=2)",
        ),
        (
            vec!["--max-cost", "1", "--max-cost", "2", "hi"],
            "--max-cost gives the total cap twice (1 and 2)",
        ),
        (
            vec!["--batch", "-", "--max-cost", "x=-0.5"],
            "--max-cost 'x=-0.5': '-0.5' is not a positive amount",
        ),
    ] {
        let err = run(&args).expect_err(&format!("{args:?}"));
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains('\n'), "{err}");
    }
    // Control characters in the value are escaped, like any echoed value.
    let err = run(&["--max-cost", "1\n2", "hi"]).unwrap_err();
    assert!(!err.contains('\n'), "{err}");
}

/// `--completions SHELL` prints the script, alone; any other shell or company is a usage error.
#[test]
fn completions_are_info_and_given_alone() {
    for args in [
        &["x", "--completions", "bash"][..],
        &["x", "--completions=bash"][..],
    ] {
        match parse(args.iter().copied()) {
            Ok(Parsed::Info(text)) => {
                assert!(text.contains("complete -F _pi__ccswitch__run"), "{text}");
                assert!(text.contains("--resume-from") && text.contains("--permanent-ok"));
            }
            other => panic!("{args:?}: {other:?}"),
        }
    }
    for (args, says) in [
        (
            &["--completions", "tcsh"][..],
            "invalid value 'tcsh' for --completions",
        ),
        (&["--completions", "bash", "hi"][..], "give it alone"),
        (&["--completions", "bash", "--json"][..], "give it alone"),
        (
            &["--completions", "zsh", "--status"][..],
            "cannot be used with",
        ),
    ] {
        let err = run(args).expect_err(&format!("{args:?}"));
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--resume-from` needs `--resume`, is repeatable and keeps the order given; `--permanent-ok`
/// needs `--batch`.
#[test]
fn resume_from_and_permanent_ok() {
    let inv = run(&[
        "--batch",
        "j",
        "--output",
        "o",
        "--resume",
        "--resume-from",
        "a.jsonl",
        "--resume-from=b.jsonl",
        "--permanent-ok",
    ])
    .unwrap();
    match inv.mode {
        Mode::Batch(b) => {
            assert_eq!(
                b.resume_from,
                [PathBuf::from("a.jsonl"), PathBuf::from("b.jsonl")]
            );
            assert!(b.permanent_ok);
        }
        other => panic!("{other:?}"),
    }
    for (args, says) in [
        (
            &["--batch", "j", "--output", "o", "--resume-from", "a"][..],
            "--resume",
        ),
        (&["--permanent-ok", "hi"][..], "--batch"),
        (
            &[
                "--batch",
                "j",
                "--output",
                "o",
                "--resume",
                "--resume-from",
                "",
            ][..],
            "--resume-from requires a value",
        ),
    ] {
        let err = run(args).expect_err(&format!("{args:?}"));
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A usage error still prints a record when `--json` was asked for before any `--`.
#[test]
fn json_is_asked_before_the_double_dash_only() {
    let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
    assert!(json_asked(&os(&["x", "--modle", "m", "--json", "hi"])));
    assert!(!json_asked(&os(&["x", "--modle", "m", "--", "--json"])));
    assert!(!json_asked(&os(&["--json"])), "argv[0] is not an argument");
}
