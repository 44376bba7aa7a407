//! One version everywhere: Cargo.toml (what `--version` and every npm package say), Cargo.lock,
//! CHANGELOG's latest release, and every pin of `pi-ccswitch-run@X.Y.Z` in the READMEs, the npm
//! package's README and the recipes in `examples/`. A release that bumps one and leaves another
//! behind fails here (the packages themselves are checked from the packed tarballs in `npm`).

use std::path::Path;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `pi-ccswitch-run@VERSION` in `text` (a version starts with a digit).
fn pins(text: &str) -> Vec<String> {
    let needle = "pi-ccswitch-run@";
    text.match_indices(needle)
        .map(|(at, _)| {
            text[at + needle.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
                .collect::<String>()
        })
        .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        .collect()
}

#[test]
fn pins_in_docs_and_recipes_name_the_crate_version() {
    let mut files = vec![
        "README.md".to_string(),
        "README.zh-CN.md".to_string(),
        "npm/pi-ccswitch-run/README.md".to_string(),
    ];
    for entry in std::fs::read_dir(Path::new(ROOT).join("examples")).expect("examples/") {
        let name = entry.expect("entry").file_name();
        files.push(format!("examples/{}", name.to_string_lossy()));
    }
    for file in &files {
        for pin in pins(&read(file)) {
            assert_eq!(pin, VERSION, "{file} pins pi-ccswitch-run@{pin}");
        }
    }
    for readme in ["README.md", "README.zh-CN.md"] {
        assert!(
            !pins(&read(readme)).is_empty(),
            "{readme} pins no version of pi-ccswitch-run"
        );
    }
}

/// The lock file records the crate at its own version (`cargo test --locked` would not notice a
/// stale one until something else changed the lock).
#[test]
fn cargo_lock_has_the_crate_version() {
    let lock = read("Cargo.lock");
    let entry = format!("[[package]]\nname = \"pi-ccswitch-run\"\nversion = \"{VERSION}\"\n");
    assert!(lock.contains(&entry), "Cargo.lock lacks {entry:?}");
}

/// CHANGELOG: an "Unreleased" section on top (work landing after the release goes there), then
/// the crate's version as the latest release, once.
#[test]
fn changelog_latest_release_is_the_crate_version() {
    let log = read("CHANGELOG.md");
    let headings: Vec<&str> = log.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(headings.first(), Some(&"## Unreleased"), "{headings:?}");
    let latest = headings.get(1).expect("a released version");
    assert!(
        latest.starts_with(&format!("## {VERSION} ")) || *latest == format!("## {VERSION}"),
        "CHANGELOG's latest release is {latest:?}, the crate is {VERSION}"
    );
    let same = headings
        .iter()
        .filter(|h| h.split_whitespace().nth(1) == Some(VERSION))
        .count();
    assert_eq!(same, 1, "{VERSION} has one section");
}

/// The check itself: a stale pin is found.
#[test]
fn a_stale_pin_is_found() {
    assert_eq!(
        pins(
            "npm i pi-ccswitch-run@0.2.0 x; npx pi-ccswitch-run@latest; pi-ccswitch-run@1.2.3-rc.1"
        ),
        ["0.2.0", "1.2.3-rc.1"]
    );
}
