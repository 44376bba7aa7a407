//! Generated files stay current: shell completions in `completions/` and the `--help` text in
//! README. A stale file is rewritten and the test fails, saying to commit it.

#![allow(clippy::disallowed_methods)] // the clock/env chokepoints are rules for the library

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
