//! The shape of the source tree (issue 10): the `crate::` imports between top-level modules form
//! no cycle, so the layers read top-down, and no source file outside the test modules grows past
//! ~900 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 900;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Test code: files named for tests, and everything after a `#[cfg(test)]`.
fn is_test_file(rel: &Path) -> bool {
    let name = rel
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.contains("test") || name.ends_with("_props") || name == "fuzz"
}

fn production_part(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or(text)
}

/// The top-level modules named after `crate::`, including inside `crate::{a, b::c}`.
fn used_modules(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident(&group[start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(&group[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.remove("");
    out
}

fn top_module(rel: &Path) -> String {
    let first = rel.components().next().expect("a path");
    let first = first.as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

#[test]
fn the_module_graph_has_no_cycles_and_no_file_is_too_long() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut too_long = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&src).expect("under src");
        if is_test_file(rel) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("read");
        let code = production_part(&text);
        if code.lines().count() > MAX_LINES {
            too_long.push(format!(
                "{} ({} lines)",
                rel.display(),
                code.lines().count()
            ));
        }
        let top = top_module(rel);
        let edges = graph.entry(top.clone()).or_default();
        edges.extend(used_modules(code).into_iter().filter(|m| *m != top));
    }
    assert!(too_long.is_empty(), "over {MAX_LINES} lines: {too_long:?}");
    // Depth-first search for a back edge; the cycle is reported as a path.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        let cycle = visit(node, &graph, &mut Vec::new(), &mut done);
        assert!(
            cycle.is_none(),
            "module cycle: {}",
            cycle.unwrap_or_default().join(" → ")
        );
    }
    // The scan sees the graph at all (a broken scanner would pass vacuously).
    assert!(graph["failover"].contains("health"), "{graph:?}");
    assert!(graph["driver"].contains("failover"), "{graph:?}");
    assert!(
        used_modules("use crate::{a::b, c::{d, e}};\nx(crate::f::g)")
            == ["a", "c", "f"].iter().map(|s| s.to_string()).collect()
    );
}
