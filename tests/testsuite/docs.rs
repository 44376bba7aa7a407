//! README.md and README.zh-CN.md document the same interface, and say the same (issue 21). Every
//! long flag, `PI_…`/`CCSWITCH_…` environment variable and exit code named in one README is named
//! in the other, and so is every flag of the command definition, every variable of
//! `settings::ENVIRONMENT` and every code of `Exit::ALL`. Both have the same outline: the same
//! sequence of `#`-headings by level (outside code blocks), the same tables in the same order,
//! each of the same shape (rows × columns, and every row as wide as its header), and the same
//! code blocks in the same order, by fence language. Each README links to the other, their
//! section links resolve, and the Chinese README's copy of `--help` is current (a stale copy is
//! rewritten and the test fails, saying to commit it). Reads the two READMEs only; writes only a
//! stale help block.

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

/// A heading outside code blocks: `#`s (1 to 6) and a space, as GitHub reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Heading {
    line: usize,
    level: usize,
    title: String,
}

/// A table: a header row, a delimiter row (`|---|---|`), then its body rows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Table {
    /// The header's line.
    line: usize,
    /// Body rows (the header and the delimiter row not counted).
    rows: usize,
    /// The header's cells.
    columns: usize,
    /// Lines of the rows whose number of cells is not the header's, with that number.
    ragged: Vec<(usize, usize)>,
}

/// A fenced code block: its opening fence's line and language (`sh`, `json`, or empty).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fence {
    line: usize,
    lang: String,
}

/// What the parity tests compare: a README's headings, tables and code blocks, in order. Lines
/// are 1-based.
#[derive(Debug, Default)]
struct Outline {
    headings: Vec<Heading>,
    tables: Vec<Table>,
    fences: Vec<Fence>,
}

/// The cells of a table row, as GitHub splits them: at every `|` not escaped as `\|` (a `|`
/// inside a code span splits too), the outer pipes dropped.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = if row.ends_with('|') && !row.ends_with("\\|") {
        &row[..row.len() - 1]
    } else {
        row
    };
    let mut out = vec![String::new()];
    let mut escaped = false;
    for c in row.chars() {
        if c == '|' && !escaped {
            out.push(String::new());
        } else if let Some(cell) = out.last_mut() {
            cell.push(c);
        }
        escaped = c == '\\' && !escaped;
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// A table's delimiter row: cells of dashes, each with optional alignment colons.
fn is_delimiter_row(line: &str) -> bool {
    let line = line.trim();
    line.starts_with('|')
        && line.contains('-')
        && cells(line).iter().all(|c| {
            let c = c.strip_prefix(':').unwrap_or(c);
            let c = c.strip_suffix(':').unwrap_or(c);
            !c.is_empty() && c.bytes().all(|b| b == b'-')
        })
}

/// A README's outline. A line whose first non-blank characters are ```` ``` ```` opens or closes
/// a code block (the opening one names its language); nothing inside one is a heading or a table.
fn outline(text: &str) -> Outline {
    let mut out = Outline::default();
    let lines: Vec<&str> = text.lines().collect();
    let mut in_fence = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let n = i + 1;
        i += 1;
        if let Some(info) = line.trim_start().strip_prefix("```") {
            if !in_fence {
                let lang = info.split_whitespace().next().unwrap_or("").to_string();
                out.fences.push(Fence { line: n, lang });
            }
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            out.headings.push(Heading {
                line: n,
                level: hashes,
                title: line[hashes..].trim().to_string(),
            });
            continue;
        }
        if line.trim_start().starts_with('|') && lines.get(i).is_some_and(|l| is_delimiter_row(l)) {
            let columns = cells(line).len();
            i += 1;
            let mut table = Table {
                line: n,
                rows: 0,
                columns,
                ragged: Vec::new(),
            };
            while let Some(row) = lines.get(i).filter(|l| l.trim_start().starts_with('|')) {
                table.rows += 1;
                let width = cells(row).len();
                if width != columns {
                    table.ragged.push((i + 1, width));
                }
                i += 1;
            }
            out.tables.push(table);
        }
    }
    out
}

/// The anchors of a README's headings (outside code fences), duplicates numbered as GitHub does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for heading in outline(text).headings {
        let base = slug(&heading.title);
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

/// Where two sequences first differ by `key` (or, when one is a prefix of the other, where the
/// shorter ends), each side's item there described by `show`; `None` when they agree.
fn first_difference<T, K: PartialEq>(
    kind: &str,
    en: &[T],
    zh: &[T],
    key: impl Fn(&T) -> K,
    show: impl Fn(&T) -> String,
) -> Option<String> {
    let at = en
        .iter()
        .zip(zh)
        .position(|(a, b)| key(a) != key(b))
        .or_else(|| (en.len() != zh.len()).then(|| en.len().min(zh.len())))?;
    let side = |name: &str, items: &[T]| match items.get(at) {
        Some(item) => format!("{name}:{}", show(item)),
        None => format!("{name}: nothing more"),
    };
    Some(format!(
        "{kind} differ at #{}: {} vs {} ({} in {EN}, {} in {ZH})",
        at + 1,
        side(EN, en),
        side(ZH, zh),
        en.len(),
        zh.len()
    ))
}

/// Both outlines, each checked to have found enough to compare (a scanner that finds nothing
/// would make every comparison pass).
fn outlines() -> (Outline, Outline) {
    let both = (outline(&read(EN)), outline(&read(ZH)));
    for (name, o) in [(EN, &both.0), (ZH, &both.1)] {
        assert!(
            o.headings.len() >= 20 && o.tables.len() >= 10 && o.fences.len() >= 20,
            "{name}: the outline scanner found only {} headings, {} tables and {} code blocks",
            o.headings.len(),
            o.tables.len(),
            o.fences.len()
        );
    }
    both
}

#[test]
fn both_readmes_have_the_same_section_headings() {
    let (en, zh) = outlines();
    let difference = first_difference(
        "section headings (by level)",
        &en.headings,
        &zh.headings,
        |h| h.level,
        |h| format!("{}: {} {}", h.line, "#".repeat(h.level), h.title),
    );
    assert!(difference.is_none(), "{}", difference.unwrap_or_default());
}

#[test]
fn both_readmes_have_the_same_tables() {
    let (en, zh) = outlines();
    let mut problems = Vec::new();
    for (name, o) in [(EN, &en), (ZH, &zh)] {
        for t in &o.tables {
            for (line, width) in &t.ragged {
                problems.push(format!(
                    "{name}:{line}: a row of {width} cells in the table of {} columns at line {}",
                    t.columns, t.line
                ));
            }
        }
    }
    problems.extend(first_difference(
        "tables (rows × columns)",
        &en.tables,
        &zh.tables,
        |t| (t.rows, t.columns),
        |t| format!("{}: {} × {}", t.line, t.rows, t.columns),
    ));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn both_readmes_have_the_same_code_blocks() {
    let (en, zh) = outlines();
    let difference = first_difference(
        "code blocks (by fence language)",
        &en.fences,
        &zh.fences,
        |f| f.lang.clone(),
        |f| format!("{}: ```{}", f.line, f.lang),
    );
    assert!(difference.is_none(), "{}", difference.unwrap_or_default());
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
    let doc = "# T\n\n| a | b |\n|---|:-:|\n| 1 | `x\\|y` |\n| 2 | a|b |\nafter\n\n\
               ```sh\n# no\n| not | a table |\n|---|---|\n```\n### S\n\n  ```json\n  {}\n  ```\n\
               | one |\n| - |\n| x |\n| not a delimiter |\n|-x-|\n";
    let o = outline(doc);
    let found: Vec<(usize, usize, &str)> = o
        .headings
        .iter()
        .map(|h| (h.line, h.level, h.title.as_str()))
        .collect();
    assert_eq!(found, [(1, 1, "T"), (14, 3, "S")]);
    let t = |line, rows, columns, ragged: Vec<(usize, usize)>| Table {
        line,
        rows,
        columns,
        ragged,
    };
    assert_eq!(
        o.tables,
        [t(3, 2, 2, vec![(6, 3)]), t(19, 3, 1, vec![])],
        "the second table's rows run until a line that does not start with |"
    );
    let found: Vec<(usize, &str)> = o.fences.iter().map(|f| (f.line, f.lang.as_str())).collect();
    assert_eq!(found, [(9, "sh"), (16, "json")]);
    assert_eq!(cells("| `a\\|b` | c |"), ["`a\\|b`", "c"]);
    let levels = |s: &str| s.bytes().map(usize::from).collect::<Vec<_>>();
    assert_eq!(
        first_difference("x", &levels("ab"), &levels("ab"), |&l| l, |l| l.to_string()),
        None
    );
    assert_eq!(
        first_difference(
            "x",
            &levels("abc"),
            &levels("ab"),
            |&l| l,
            |l| l.to_string()
        ),
        Some(format!(
            "x differ at #3: {EN}:99 vs {ZH}: nothing more (3 in {EN}, 2 in {ZH})"
        ))
    );
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
