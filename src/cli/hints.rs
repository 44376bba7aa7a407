//! Usage errors that say what was meant: a flag typed with a look-alike Unicode dash, and a
//! flag given without the one it needs (clap names only the missing one).
//!
//! A leaf below the command line's definition: it returns the message and is handed the clap
//! command to search, so `cli` uses it and it uses nothing of `cli`.

use std::ffi::OsString;

/// Names the flag that needs another one (clap only names the missing one).
pub(super) fn missing_requirement(args: &[OsString]) -> Option<String> {
    let given = |flag: &str| {
        args.iter().skip(1).take_while(|a| *a != "--").any(|a| {
            let a = a.to_string_lossy();
            a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('='))
        })
    };
    if given("--resume") && !given("--output") {
        return Some(
            "--resume needs --output FILE: it skips the jobs that already have a success there"
                .to_string(),
        );
    }
    for flag in ["--retry-failed", "--rerun-changed"] {
        if given(flag) && !given("--resume") {
            return Some(format!(
                "{flag} works only with --resume (and --output FILE): it decides which recorded \
                 jobs run again"
            ));
        }
    }
    if given("--batch") {
        return None;
    }
    ["--jobs", "--output", "--shard", "--resume"]
        .into_iter()
        .find(|f| given(f))
        .map(|f| format!("{f} works only with --batch FILE"))
}

/// Dashes that phones, word processors and some editors put where two hyphens were typed.
const LOOKALIKE_DASHES: &[(char, &str)] = &[
    ('\u{2010}', "HYPHEN"),
    ('\u{2011}', "NON-BREAKING HYPHEN"),
    ('\u{2012}', "FIGURE DASH"),
    ('\u{2013}', "EN DASH"),
    ('\u{2014}', "EM DASH"),
    ('\u{2015}', "HORIZONTAL BAR"),
    ('\u{2212}', "MINUS SIGN"),
    ('\u{FE58}', "SMALL EM DASH"),
    ('\u{FE63}', "SMALL HYPHEN-MINUS"),
    ('\u{FF0D}', "FULLWIDTH HYPHEN-MINUS"),
];

/// A word before `--` that starts with a look-alike dash followed by a flag-like name (`—model`)
/// was meant as an option; taking it as prompt text would silently change the run. `command`
/// gives the flags to suggest from (built only when such a word is found).
pub(super) fn unicode_dash(
    args: &[OsString],
    command: impl Fn() -> clap::Command,
) -> Option<String> {
    for arg in args.iter().skip(1).take_while(|a| *a != "--") {
        let text = arg.to_string_lossy();
        let first = text.chars().next()?;
        let Some((_, name)) = LOOKALIKE_DASHES.iter().find(|(c, _)| *c == first) else {
            continue;
        };
        let rest = text.trim_start_matches(|c: char| {
            c == '-' || LOOKALIKE_DASHES.iter().any(|(d, _)| *d == c)
        });
        let flag_like = rest.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && rest
                .split('=')
                .next()
                .is_some_and(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        if !flag_like {
            continue;
        }
        let (name_part, value) = match rest.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (rest, None),
        };
        let command = command();
        let longs: Vec<String> = command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .collect();
        let shorts: Vec<String> = command
            .get_arguments()
            .filter_map(|a| a.get_short())
            .map(|c| format!("-{c}"))
            .collect();
        // Only a flag that exists is suggested: the exact one, else the closest long flags.
        let wanted = format!("--{name_part}");
        let short = format!("-{name_part}");
        let named: Vec<String> = if longs.contains(&wanted) {
            vec![wanted]
        } else if shorts.contains(&short) {
            vec![short]
        } else {
            let refs: Vec<&str> = longs.iter().map(String::as_str).collect();
            crate::catalog::suggest::closest(&wanted, &refs, 3)
                .into_iter()
                .map(str::to_string)
                .collect()
        };
        let hint = match named.as_slice() {
            [] => "options start with ASCII '-'".to_string(),
            _ => {
                let with_value = |f: &String| match value {
                    Some(v) => format!("{f}={v}"),
                    None => f.clone(),
                };
                format!(
                    "did you mean {}?",
                    named
                        .iter()
                        .map(with_value)
                        .collect::<Vec<_>>()
                        .join(" or ")
                )
            }
        };
        return Some(format!(
            "'{text}' starts with a Unicode dash (U+{:04X} {name}), not '-'; {hint} (put prompt \
             words after -- to send them as they are)",
            u32::from(first)
        ));
    }
    None
}
