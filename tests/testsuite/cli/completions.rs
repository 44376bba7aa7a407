//! Generated files stay current: shell completions in `completions/`, the man page
//! `pi-ccswitch-run.1` and the `--help` text in README. A stale file is rewritten and the test
//! fails, saying to commit it. README's exit-code table matches the `Exit` enum.

use std::path::Path;

use clap_complete::{Shell, generate};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Writes `content` to `path` if it differs; returns whether it was stale.
fn ensure(path: &Path, content: &str) -> bool {
    let current = std::fs::read_to_string(path).unwrap_or_default();
    if current == content {
        return false;
    }
    std::fs::write(path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    true
}

#[test]
fn shell_completions_are_current() {
    let mut stale = Vec::new();
    for (shell, file) in [
        (Shell::Bash, "pi-ccswitch-run.bash"),
        (Shell::Zsh, "_pi-ccswitch-run"),
        (Shell::Fish, "pi-ccswitch-run.fish"),
        (Shell::PowerShell, "_pi-ccswitch-run.ps1"),
        (Shell::Elvish, "pi-ccswitch-run.elv"),
    ] {
        let mut cmd = pi_ccswitch_run::cli::command();
        let mut out = Vec::new();
        generate(shell, &mut cmd, "pi-ccswitch-run", &mut out);
        let text = String::from_utf8(out).expect("completions are UTF-8");
        assert!(text.contains("timeout-ms"), "{file} lacks a flag");
        if ensure(&root().join("completions").join(file), &text) {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "completions were out of date and have been regenerated: {stale:?}; commit the updated files"
    );
}

#[test]
fn readme_usage_block_matches_help() {
    let help = pi_ccswitch_run::cli::command().render_help().to_string();
    let readme_path = root().join("README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let (start, end) = ("<!-- help:start -->\n```text\n", "```\n<!-- help:end -->");
    let i = readme
        .find(start)
        .expect("README has the help:start marker")
        + start.len();
    let j = readme[i..]
        .find(end)
        .expect("README has the help:end marker")
        + i;
    let block = format!("{}\n", help.trim_end());
    let updated = format!("{}{block}{}", &readme[..i], &readme[j..]);
    assert!(
        !ensure(&readme_path, &updated),
        "README's usage block was out of date and has been regenerated; commit README.md"
    );
}

/// The man page: clap's sections (name, synopsis, description, options, version) plus exit
/// status, environment, files, examples and see-also, all from the same definitions as `--help`.
fn man_page() -> String {
    use clap_mangen::roff::{Roff, bold, roman};
    use pi_ccswitch_run::cli::FILES;
    use pi_ccswitch_run::exit::Exit;
    use pi_ccswitch_run::settings::ENVIRONMENT;
    let cmd = pi_ccswitch_run::cli::command();
    let man = clap_mangen::Man::new(cmd).date("2026-12-06");
    let mut out = Vec::new();
    man.render_title(&mut out).expect("render");
    man.render_name_section(&mut out).expect("render");
    man.render_synopsis_section(&mut out).expect("render");
    man.render_description_section(&mut out).expect("render");
    man.render_options_section(&mut out).expect("render");
    let mut roff = Roff::default();
    roff.control("SH", ["EXIT STATUS"]);
    for exit in Exit::ALL {
        roff.control("TP", [] as [&str; 0]);
        roff.text([bold(exit.code().to_string())]);
        roff.text([roman(exit.meaning())]);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    for v in ENVIRONMENT {
        roff.control("TP", [] as [&str; 0]);
        roff.text([bold(v.name)]);
        roff.text([roman(v.describe())]);
    }
    roff.control("SH", ["FILES"]);
    for (name, what) in FILES {
        roff.control("TP", [] as [&str; 0]);
        roff.text([bold(name)]);
        roff.text([roman(what)]);
    }
    roff.control("SH", ["EXAMPLES"]);
    for (what, line) in [
        (
            "Summarise a document without tools:",
            "pi-ccswitch-run --no-tools --no-context-files @report.md \"Summarise in five bullet points\"",
        ),
        (
            "Review a diff from a pipe:",
            "git diff | pi-ccswitch-run --no-tools \"review this diff\" @-",
        ),
        (
            "See what would be tried, sending nothing:",
            "pi-ccswitch-run --explain \"hello\"",
        ),
        (
            "A resumable, sharded batch:",
            "pi-ccswitch-run --batch jobs.jsonl --shard 0/4 --output out-0.jsonl --resume --no-tools",
        ),
    ] {
        roff.control("TP", [] as [&str; 0]);
        roff.text([roman(what)]);
        roff.text([bold(line)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    roff.text([bold("pi"), roman("(1), the README of pi-ccswitch-run")]);
    roff.to_writer(&mut out).expect("render");
    man.render_version_section(&mut out).expect("render");
    String::from_utf8(out).expect("man page is UTF-8")
}

#[test]
fn man_page_is_current_and_renders() {
    let path = root().join("pi-ccswitch-run.1");
    let page = man_page();
    for section in ["EXIT STATUS", "ENVIRONMENT", "FILES", "timeout", "explain"] {
        assert!(page.contains(section), "the man page lacks {section}");
    }
    let stale = ensure(&path, &page);
    // `man -l` renders the committed file.
    let out = std::process::Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(&path)
        .env("MANWIDTH", "100")
        .output()
        .expect("man is installed (man-db)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "man -l failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("EXIT STATUS") && text.contains("CCSWITCH_HEALTH_URL"),
        "{text}"
    );
    assert!(
        !stale,
        "pi-ccswitch-run.1 was out of date and has been regenerated; commit the updated file"
    );
}

#[test]
fn readme_exit_code_table_matches_the_exit_enum() {
    use pi_ccswitch_run::exit::Exit;
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    for exit in Exit::ALL {
        let code = exit.code();
        assert!(
            readme
                .lines()
                .any(|l| l.starts_with(&format!("| {code} ")) || l.contains(&format!("/ {code} |"))),
            "README's exit-code table lacks {code}"
        );
    }
}
