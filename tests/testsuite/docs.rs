//! README.md and README.zh-CN.md document the same interface. Every long flag, `PI_…`/`CCSWITCH_…`
//! environment variable and exit code named in one README is named in the other, and so is
//! every flag of the command definition, every variable of `settings::ENVIRONMENT` and every code of
//! `Exit::ALL`. Each README links to the other, their section links resolve, and the Chinese
//! README's copy of `--help` is current (a stale copy is rewritten and the test fails, saying to
//! commit it). Reads the two READMEs only; writes only a stale help block.

use std::collections::BTreeSet;
use std::path::Path;

const EN: &str = "README.md";
const ZH: &str = "README.zh-CN.md";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(name: &str) -> String {
    std::fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The text with every URL (`scheme://…`) blanked out, so `--x` inside a link is not a flag.
/// A URL ends at whitespace, markdown or quoting punctuation, or the first non-ASCII byte.
fn without_urls(text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    let mut i = 0;
    while let Some(at) = b[i..].windows(3).position(|w| w == b"://") {
        let sep = i + at;
        let mut start = sep;
        while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b"+.-".contains(&b[start - 1]))
        {
            start -= 1;
        }
        let mut end = sep + 3;
        while end < b.len()
            && b[end].is_ascii()
            && !b[end].is_ascii_whitespace()
            && !b"`)>]<\"'|".contains(&b[end])
        {
            end += 1;
        }
        // Only ASCII bytes are replaced, so the buffer stays UTF-8.
        b[start..end].fill(b' ');
        i = end;
    }
    b
}

/// `--long-flag` tokens (`--[a-z][a-z-]+`, not glued to a word or a third dash), outside URLs.
fn long_flags(text: &str) -> BTreeSet<String> {
    let b = without_urls(text);
    let mut found = BTreeSet::new();
    for i in 0..b.len() {
        let glued = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-');
        if glued || !b[i..].starts_with(b"--") || !b.get(i + 2).is_some_and(u8::is_ascii_lowercase)
        {
            continue;
        }
        let mut end = i + 2;
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end] == b'-') {
            end += 1;
        }
        let token = String::from_utf8_lossy(&b[i..end]);
        let token = token.trim_end_matches('-');
        if token.len() >= 4 {
            found.insert(token.to_string());
        }
    }
    found
}

/// `PI_…` and `CCSWITCH_…` tokens (upper-case letters, digits, `_`), starting a word.
fn env_vars(text: &str) -> BTreeSet<String> {
    let b = text.as_bytes();
    let mut found = BTreeSet::new();
    for i in 0..b.len() {
        if i > 0 && is_word_byte(b[i - 1]) {
            continue;
        }
        let Some(prefix) = [&b"PI_"[..], b"CCSWITCH_"]
            .into_iter()
            .find(|p| b[i..].starts_with(p))
        else {
            continue;
        };
        let mut end = i + prefix.len();
        while end < b.len()
            && (b[end].is_ascii_uppercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let token = String::from_utf8_lossy(&b[i..end]);
        let token = token.trim_end_matches('_');
        if token.len() >= prefix.len() {
            found.insert(token.to_string());
        }
    }
    found
}

/// The codes of the exit-code table: table rows whose first cell is codes, `| 0 |` or
/// `| 130 / 143 |`.
fn exit_codes(text: &str) -> BTreeSet<u16> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let Some(cell) = row.split('|').next() else {
            continue;
        };
        let codes: Option<Vec<u16>> = cell
            .split('/')
            .map(|c| {
                let c = c.trim();
                if c.is_empty() || !c.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                c.parse().ok()
            })
            .collect();
        if let Some(codes) = codes {
            found.extend(codes);
        }
    }
    found
}

/// GitHub's anchor for a heading: lower-cased, punctuation dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a README's headings (outside code fences), duplicates numbered as GitHub does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        if in_fence || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while found.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        found.insert(anchor);
    }
    found
}

/// Targets of markdown links `[text](target)`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            let target = &rest[..end];
            if !target.is_empty() && !target.contains(char::is_whitespace) {
                targets.push(target.to_string());
            }
        }
    }
    targets
}

/// "KIND missing from README.zh-CN.md: a, b" for whatever one side lacks.
fn missing<T: Ord + std::fmt::Display>(
    kind: &str,
    en: &BTreeSet<T>,
    zh: &BTreeSet<T>,
    required: &BTreeSet<T>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, have, other) in [(EN, en, zh), (ZH, zh, en)] {
        let lacking: Vec<String> = other
            .iter()
            .chain(required)
            .filter(|x| !have.contains(x))
            .map(ToString::to_string)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !lacking.is_empty() {
            problems.push(format!(
                "{kind} missing from {name}: {}",
                lacking.join(", ")
            ));
        }
    }
    problems
}

#[test]
fn both_readmes_document_the_same_flags() {
    let mut cmd = pi_ccswitch_run::cli::command();
    cmd.build();
    let defined: BTreeSet<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(|l| format!("--{l}"))
        .collect();
    assert!(
        defined.contains("--timeout-ms") && defined.contains("--help"),
        "the command definition's flags were not read: {defined:?}"
    );
    let problems = missing(
        "flags",
        &long_flags(&read(EN)),
        &long_flags(&read(ZH)),
        &defined,
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn both_readmes_document_the_same_environment_variables() {
    let defined: BTreeSet<String> = pi_ccswitch_run::settings::ENVIRONMENT
        .iter()
        .map(|v| v.name.to_string())
        .collect();
    let problems = missing(
        "environment variables",
        &env_vars(&read(EN)),
        &env_vars(&read(ZH)),
        &defined,
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn both_exit_code_tables_list_every_exit_code() {
    let defined: BTreeSet<u16> = pi_ccswitch_run::exit::Exit::ALL
        .iter()
        .map(|e| u16::from(e.code()))
        .collect();
    let problems = missing(
        "exit codes",
        &exit_codes(&read(EN)),
        &exit_codes(&read(ZH)),
        &defined,
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn each_readme_links_to_the_other() {
    let (en, zh) = (read(EN), read(ZH));
    let mut problems = Vec::new();
    if !link_targets(&en).iter().any(|t| t == ZH) {
        problems.push(format!("{EN} has no link to {ZH}"));
    }
    // "English: README.md" belongs at the top of the translation.
    let top: String = zh.lines().take(5).collect::<Vec<_>>().join("\n");
    if !link_targets(&top).iter().any(|t| t == EN) {
        problems.push(format!("{ZH} has no link to {EN} in its first 5 lines"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn section_and_file_links_resolve() {
    let mut problems = Vec::new();
    for name in [EN, ZH] {
        let text = read(name);
        for target in link_targets(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let file = if file.is_empty() { name } else { file };
            if !root().join(file).exists() {
                problems.push(format!("{name}: link to missing file {target}"));
                continue;
            }
            if !anchor.is_empty() && !anchors(&read(file)).contains(anchor) {
                problems.push(format!("{name}: link to missing section {target}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn chinese_readme_carries_the_current_help_without_the_markers() {
    let path = root().join(ZH);
    let zh = read(ZH);
    for marker in ["<!-- help:start -->", "<!-- help:end -->"] {
        assert!(
            !zh.contains(marker),
            "{ZH} must not contain {marker}: the help test regenerates README.md's block only"
        );
    }
    let help = pi_ccswitch_run::cli::command().render_help().to_string();
    let first_line = help.lines().next().expect("--help has a first line");
    let open = format!("```text\n{first_line}\n");
    let start = zh.find(&open).unwrap_or_else(|| {
        panic!("{ZH} lacks the --help block (a ```text fence starting with {first_line:?})")
    }) + "```text\n".len();
    let end = zh[start..]
        .find("\n```")
        .map(|j| start + j + 1)
        .expect("the --help block's fence is closed");
    let block = format!("{}\n", help.trim_end());
    if zh[start..end] != block {
        let updated = format!("{}{block}{}", &zh[..start], &zh[end..]);
        std::fs::write(&path, updated).unwrap_or_else(|e| panic!("write {ZH}: {e}"));
        panic!("{ZH}'s copy of --help was out of date and has been regenerated; commit {ZH}");
    }
}

#[test]
fn scanners_read_what_they_should() {
    let text = "Use `--json`, --flag=value and -v; not https://x.test/a--b?--q=1 nor <!-- x --> \
                nor ---rule nor pre--post. 用--model 选模型，--wait。\n\
                | a | b |\n|---|---|\n| 0 | ok |\n| 130 / 143 | signals |\n| 402 quota | x |\n\
                $PI_CODING_AGENT_DIR, CCSWITCH_STALL_MS=1, ZAI_API_KEY, XPI_BIN, `CCSWITCH_…`, PI_\n";
    let flags: Vec<String> = long_flags(text).into_iter().collect();
    assert_eq!(flags, ["--flag", "--json", "--model", "--wait"]);
    let vars: Vec<String> = env_vars(text).into_iter().collect();
    assert_eq!(vars, ["CCSWITCH_STALL_MS", "PI_CODING_AGENT_DIR"]);
    let codes: Vec<u16> = exit_codes(text).into_iter().collect();
    assert_eq!(codes, [0, 130, 143]);
    assert_eq!(
        slug("Recipes: cron, GNU parallel, Kubernetes, Slurm"),
        "recipes-cron-gnu-parallel-kubernetes-slurm"
    );
    assert_eq!(
        slug("跨机器共享健康状态（Redis）"),
        "跨机器共享健康状态redis"
    );
    let headings = "# A\n```sh\n# not a heading\n```\n## Exit codes\n## A\n#nospace\n";
    let found: Vec<String> = anchors(headings).into_iter().collect();
    assert_eq!(found, ["a", "a-1", "exit-codes"]);
    let report = missing(
        "flags",
        &BTreeSet::from(["--a".to_string(), "--b".to_string()]),
        &BTreeSet::from(["--a".to_string()]),
        &BTreeSet::from(["--c".to_string()]),
    );
    assert_eq!(
        report,
        [
            format!("flags missing from {EN}: --c"),
            format!("flags missing from {ZH}: --b, --c"),
        ]
    );
}
