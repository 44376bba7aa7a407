//! The shape of the source tree (issues 10, 22 and 30): no import cycle at any depth — neither
//! between top-level modules (so the layers read top-down) nor between any two modules, a parent
//! and its child included (a child may use its parent's items, or the parent its child's, not
//! both) — no import from the core (failover, health, capacity, rpc) up into the shell, no
//! source file past ~900 lines counted over the whole file, tests included (in `src/`,
//! `tests/`, `benches/` and `examples/`), and no two types of the same name.

mod modgraph;

use std::path::{Path, PathBuf};

use modgraph::{Graph, ModPath, show};

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

fn m(path: &str) -> ModPath {
    path.split("::")
        .skip(1)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn cycle_text(cycle: &[ModPath]) -> String {
    cycle.iter().map(show).collect::<Vec<_>>().join(" → ")
}

/// The crate's module graph, read from `src/lib.rs` down.
fn crate_graph() -> Graph {
    Graph::of_crate(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
}

#[test]
fn no_source_file_is_too_long() {
    // The crate and everything built beside it: its tests, benches and examples.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "examples"] {
        sources(&root.join(dir), &mut files);
    }
    let mut too_long = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(root).expect("under the crate");
        // The whole file, its tests included: a long test module is a long file too.
        let lines = std::fs::read_to_string(path).expect("read").lines().count();
        if lines > MAX_LINES {
            too_long.push(format!("{} ({lines} lines)", rel.display()));
        }
    }
    assert!(files.len() > 100, "the scan sees the tree: {}", files.len());
    assert!(too_long.is_empty(), "over {MAX_LINES} lines: {too_long:?}");
}

/// The types a file defines at any depth (`struct`, `enum`, `trait`, `type`, `union`), but not
/// associated types (`type Item = …` in an impl or a trait).
fn type_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let code = line.trim_start();
        let indented = code.len() != line.len();
        let code = code
            .strip_prefix("pub(crate) ")
            .or_else(|| code.strip_prefix("pub(super) "))
            .or_else(|| code.strip_prefix("pub "))
            .unwrap_or(code);
        for kind in ["struct ", "enum ", "trait ", "type ", "union "] {
            let Some(rest) = code.strip_prefix(kind) else {
                continue;
            };
            if kind == "type " && indented {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                names.push(name);
            }
        }
    }
    names
}

/// Issue 30: no two types of the same name in the crate's code (test modules may keep a
/// reference model of a type they check against, under its own name).
#[test]
fn no_two_types_share_a_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for path in &files {
        let rel = path.strip_prefix(&src).expect("under src");
        let stem = rel.file_stem().map(|s| s.to_string_lossy().into_owned());
        if stem
            .as_deref()
            .is_some_and(|s| s.contains("test") || s.ends_with("_props") || s == "fuzz")
        {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("read");
        let production = text.split("#[cfg(test)]").next().unwrap_or(&text);
        for name in type_names(production) {
            seen.entry(name)
                .or_default()
                .push(rel.display().to_string());
        }
    }
    assert!(
        seen.contains_key("Machine") && seen.contains_key("JobEnd"),
        "the scan sees the types"
    );
    let twice: Vec<String> = seen
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "types of the same name:\n{}",
        twice.join("\n")
    );
    // The scanner: associated types are not types of the crate; nested and private ones are.
    assert_eq!(
        type_names(
            "pub struct A;\nimpl X for A {\n    type Item = u8;\n}\n    enum B {}\ntype C = u8;"
        ),
        ["A", "B", "C"]
    );
}

#[test]
fn no_module_cycle_at_any_depth() {
    let graph = crate_graph();
    let cycles: Vec<String> = graph.cycles().iter().map(|c| cycle_text(c)).collect();
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
    // The production layers, top-level module by top-level module (a test module may use any
    // layer's helpers; production code only those below it).
    let production = |p: &ModPath| !graph.modules.get(p).is_some_and(|m| m.test);
    let top = graph.top_level(production);
    if let Some(cycle) = modgraph::find_cycle(&top) {
        panic!("top-level module cycle: {}", cycle_text(&cycle));
    }
    // Nothing of the core reaches up into the shell, nor into what the process shares.
    let core = ["failover", "health", "capacity", "rpc"];
    let above = [
        "driver", "batch", "single", "manage", "output", "shared", "job",
    ];
    let mut upward = Vec::new();
    for c in core {
        for to in &top[&m(&format!("crate::{c}"))] {
            if above.iter().any(|a| *to == m(&format!("crate::{a}"))) {
                upward.push(format!("crate::{c} → {}", show(to)));
            }
        }
    }
    assert!(upward.is_empty(), "core imports the shell: {upward:?}");
    // The scan sees the tree and its edges at all (a broken scanner would pass vacuously):
    // file modules, `#[path]` test files, inline test modules, and edges written each way.
    for module in [
        "crate::health::store::redis_store::url::tests",
        "crate::settings::tests",
        "crate::cli::tests::random_argv",
        "crate::fuzz",
    ] {
        assert!(graph.modules.contains_key(&m(module)), "{module} not found");
    }
    assert!(graph.modules[&m("crate::settings::tests")].test);
    assert!(!graph.modules[&m("crate::health::store")].test);
    for (from, to) in [
        ("crate::failover", "crate::health"),
        ("crate::driver", "crate::failover"),
    ] {
        assert!(
            top[&m(from)].contains(&m(to)),
            "{from} → {to} not found: {top:?}"
        );
    }
    for (from, to) in [
        // `use crate::…`, `use super::…`, a parent's re-export of its child, a child module's
        // path in code, a path through imports (`super::Incoming`: a glob, then codec's `use super::Incoming`).
        ("crate::health::store::api", "crate::health"),
        ("crate::health::store::file", "crate::health::store::api"),
        ("crate::health::store", "crate::health::store::file"),
        ("crate::cli", "crate::cli::hints"),
        ("crate::attach::image::fit", "crate::attach::image::types"),
        (
            "crate::health::store::redis_store::url::tests",
            "crate::health::store",
        ),
        ("crate::settings::tests", "crate::settings"),
        ("crate::rpc::codec::tests::old", "crate::rpc"),
    ] {
        assert!(
            graph.edges[&m(from)].contains(&m(to)),
            "{from} → {to} not found: {:?}",
            graph.edges[&m(from)]
        );
    }
}

#[test]
fn the_scanner_resolves_paths_to_modules() {
    let g = Graph::of_text(
        r##"
        mod a { pub mod b { pub struct T; } pub fn f() {} }
        mod c {
            use crate::a::{b::T, self as alias};
            // crate::z::Q in a comment and "crate::z::Q" in a string are no use.
            fn g() { let _ = '{'; alias::f(); let _ = r#"}"#; }
            mod d { use super::super::a::b; fn h(_: b::T) {} }
            mod e { use super::*; }
        }
        #[cfg(test)]
        mod t { fn x() { crate::c::g(); std::mem::drop(1); } }
        "##,
    );
    let edges = |from: &str| -> Vec<String> { g.edges[&m(from)].iter().map(show).collect() };
    assert_eq!(edges("crate::c"), ["crate::a", "crate::a::b"]);
    assert_eq!(edges("crate::c::d"), ["crate::a::b"]);
    assert_eq!(edges("crate::c::e"), ["crate::c"]);
    assert_eq!(edges("crate::t"), ["crate::c"]);
    assert!(edges("crate").is_empty(), "declaring a module is not a use");
    assert!(g.modules[&m("crate::t")].test);
    assert!(!g.modules[&m("crate::c::d")].test);
    assert!(g.cycle().is_none());

    // A parent and a child that use each other are a cycle; a deeper one is found too.
    let g =
        Graph::of_text("mod p { pub struct S; mod q { pub struct R; use super::S; } use q::R; }");
    let cycle = cycle_text(&g.cycle().expect("p ↔ p::q"));
    assert_eq!(cycle, "crate::p → crate::p::q → crate::p");
    let g = Graph::of_text(
        "mod a { pub mod x { fn f() { crate::b::y::g(); } } }
         mod b { pub mod y { pub fn g() {} fn h() { crate::a::z::k(); } } }
         mod a2 {}",
    );
    assert!(g.cycle().is_none(), "a::x → b::y only");
    let g = Graph::of_text(
        "mod a { pub mod x { fn f() { crate::b::y::g(); } } }
         mod b { pub mod y { pub fn g() { crate::a::x::f(); } } }",
    );
    assert_eq!(
        cycle_text(&g.cycle().expect("a::x ↔ b::y")),
        "crate::a::x → crate::b::y → crate::a::x"
    );
}
