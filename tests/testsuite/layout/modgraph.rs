//! The crate's module graph, read from the source text: every module (files, `#[path]` files and
//! inline `mod x { … }` blocks, test modules included) and, for each, the modules whose items it
//! uses. A path counts where it names a module: `crate::a::b::Item`, `super::x`, `self::y`, a
//! child module's name, or a name a `use` bound to a module; it is resolved to the longest prefix
//! that is a module (`crate::a::b::Item` → `crate::a::b`). Declaring `mod child;` is not a use,
//! so a parent and its child are an edge only when one names the other's items.
//!
//! It is a scanner, not a Rust parser: it drops comments and literals, tracks braces and reads
//! `mod`, `use` and `a::b` paths. That is enough for this crate's code, and the test below
//! checks it on the real tree (known edges must be found) and on small samples.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path under the crate root, e.g. `["health", "store"]` for `crate::health::store`.
pub type ModPath = Vec<String>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Str(String),
    PathSep,
    Punct(char),
}

/// Tokens of `text` without comments, whitespace, numbers or char literals.
fn lex(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0usize;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            let (s, next) = quoted(&c, i + 1);
            out.push(Tok::Str(s));
            i = next;
        } else if ch == '\'' {
            i = char_or_lifetime(&c, i, &mut out);
        } else if ch.is_ascii_digit() {
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
        } else if ident_char(ch) {
            let start = i;
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix && matches!(c.get(i), Some('"' | '#')) && raw_string_at(&c, i) {
                let (s, next) = raw_string(&c, i);
                out.push(Tok::Str(s));
                i = next;
            } else if word == "r" && c.get(i) == Some(&'#') {
                // A raw identifier, `r#type`.
                let start = i + 1;
                i = start;
                while i < c.len() && ident_char(c[i]) {
                    i += 1;
                }
                out.push(Tok::Ident(c[start..i].iter().collect()));
            } else if matches!(word.as_str(), "b" | "c") && c.get(i) == Some(&'"') {
                let (s, next) = quoted(&c, i + 1);
                out.push(Tok::Str(s));
                i = next;
            } else if word == "b" && c.get(i) == Some(&'\'') {
                i = char_or_lifetime(&c, i, &mut out);
            } else {
                out.push(Tok::Ident(word));
            }
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// The text of a `"…"` literal whose body starts at `i`, and the index after its closing quote.
fn quoted(c: &[char], mut i: usize) -> (String, usize) {
    let mut s = String::new();
    while i < c.len() && c[i] != '"' {
        if c[i] == '\\' {
            i += 1;
        }
        if let Some(&ch) = c.get(i) {
            s.push(ch);
        }
        i += 1;
    }
    (s, i + 1)
}

/// Is `c[i..]` the `#…#"` or `"` that opens a raw string (after its `r`)?
fn raw_string_at(c: &[char], mut i: usize) -> bool {
    while c.get(i) == Some(&'#') {
        i += 1;
    }
    c.get(i) == Some(&'"')
}

fn raw_string(c: &[char], mut i: usize) -> (String, usize) {
    let mut hashes = 0;
    while c[i] == '#' {
        hashes += 1;
        i += 1;
    }
    i += 1;
    let start = i;
    while i < c.len() {
        if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
            return (c[start..i].iter().collect(), i + 1 + hashes);
        }
        i += 1;
    }
    (c[start..].iter().collect(), c.len())
}

/// Skips a char literal (`'x'`, `'\n'`, `'\u{1F600}'`) at `c[i] == '\''`; a lifetime (`'a`)
/// becomes a `'` token and its name is read as an identifier next.
fn char_or_lifetime(c: &[char], i: usize, out: &mut Vec<Tok>) -> usize {
    if c.get(i + 1) == Some(&'\\') {
        let mut j = i + 3;
        while j < c.len() && c[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if c.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    out.push(Tok::Punct('\''));
    i + 1
}

/// One module of the crate.
#[derive(Debug, Clone)]
pub struct Module {
    /// Declared under `#[cfg(test)]`, or inside such a module.
    pub test: bool,
}

/// What one module's text refers to, before resolution.
#[derive(Debug, Default)]
struct Refs {
    /// Paths as written (`["crate", "a", "B"]`, `["super", "x"]`, `["child", "f"]`).
    paths: Vec<Vec<String>>,
    /// Names bound by `use` (`use crate::health;` binds `health`), to their paths as written.
    aliases: BTreeMap<String, Vec<String>>,
    /// The modules a `use …::*` imports everything from, as written.
    globs: Vec<Vec<String>>,
    /// Names of the items defined here (`struct S`, `fn f`, …).
    defs: BTreeSet<String>,
}

/// Every module of a crate and the edges between them.
#[derive(Debug, Default)]
pub struct Graph {
    pub modules: BTreeMap<ModPath, Module>,
    pub edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

/// A module file to read: its module path and whether it is a `mod.rs`-like file (its children
/// live beside it) or not (its children live in a directory named after it).
struct Pending {
    path: ModPath,
    file: PathBuf,
    test: bool,
}

impl Graph {
    /// Reads the crate whose root file is `root` (e.g. `src/lib.rs`).
    pub fn of_crate(root: &Path) -> Graph {
        let mut graph = Graph::default();
        let mut refs: BTreeMap<ModPath, Refs> = BTreeMap::new();
        let mut queue = vec![Pending {
            path: Vec::new(),
            file: root.to_path_buf(),
            test: false,
        }];
        while let Some(p) = queue.pop() {
            let text = std::fs::read_to_string(&p.file)
                .unwrap_or_else(|e| panic!("{}: {e}", p.file.display()));
            let children = scan(&text, &p, &mut graph, &mut refs);
            queue.extend(children);
        }
        graph.resolve(&refs);
        graph
    }

    /// Reads one file's text as the crate root (for the scanner's own tests).
    pub fn of_text(text: &str) -> Graph {
        let mut graph = Graph::default();
        let mut refs = BTreeMap::new();
        let root = Pending {
            path: Vec::new(),
            file: PathBuf::from("lib.rs"),
            test: false,
        };
        let files = scan(text, &root, &mut graph, &mut refs);
        for f in files {
            // Sample crates declare file modules too; they are empty.
            graph.modules.insert(f.path, Module { test: f.test });
        }
        graph.resolve(&refs);
        graph
    }

    fn resolve(&mut self, refs: &BTreeMap<ModPath, Refs>) {
        for (module, r) in refs {
            let edges = self.edges.entry(module.clone()).or_default();
            let names = Names {
                modules: &self.modules,
                refs,
            };
            for path in &r.paths {
                if let Some(target) = names.path(module, path, 0).module()
                    && target != *module
                {
                    edges.insert(target);
                }
            }
        }
        for m in self.modules.keys() {
            self.edges.entry(m.clone()).or_default();
        }
    }

    /// A cycle, as the path of modules that closes it, if there is one (depth first).
    pub fn cycle(&self) -> Option<Vec<ModPath>> {
        find_cycle(&self.edges)
    }

    /// The shortest cycle through each group of modules that reach one another, so a failure
    /// lists every tangle at once, each by its tightest loop.
    pub fn cycles(&self) -> Vec<Vec<ModPath>> {
        let mut out = Vec::new();
        let mut seen: BTreeSet<ModPath> = BTreeSet::new();
        for start in self.edges.keys() {
            if seen.contains(start) {
                continue;
            }
            // The modules on a cycle through `start`: those it reaches that reach it back.
            let from = reach(&self.edges, start);
            let group: BTreeSet<ModPath> = from
                .iter()
                .filter(|n| reach(&self.edges, n).contains(start))
                .cloned()
                .collect();
            if group.is_empty() {
                continue;
            }
            let inside: BTreeMap<ModPath, BTreeSet<ModPath>> = group
                .iter()
                .map(|n| {
                    (
                        n.clone(),
                        self.edges[n].intersection(&group).cloned().collect(),
                    )
                })
                .collect();
            if let Some(c) = shortest_cycle(&inside) {
                out.push(c);
            }
            seen.extend(group);
        }
        out
    }

    /// The graph of the top-level modules (`crate::a::b → crate::c::d` is `a → c`), over the
    /// modules `keep` selects.
    pub fn top_level(
        &self,
        keep: impl Fn(&ModPath) -> bool,
    ) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let top = |m: &ModPath| m.iter().take(1).cloned().collect::<ModPath>();
        let mut out: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (from, tos) in &self.edges {
            if from.is_empty() || !keep(from) {
                continue;
            }
            let entry = out.entry(top(from)).or_default();
            entry.extend(
                tos.iter()
                    .filter(|t| !t.is_empty() && keep(t) && top(t) != top(from))
                    .map(top),
            );
        }
        out
    }
}

/// `crate::a::b` for a module path (the root is `crate`).
pub fn show(m: &ModPath) -> String {
    std::iter::once("crate")
        .chain(m.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

/// Every module `start` reaches by one edge or more.
fn reach(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>, start: &ModPath) -> BTreeSet<ModPath> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&ModPath> = edges.get(start).into_iter().flatten().collect();
    while let Some(n) = todo.pop() {
        if seen.insert(n.clone()) {
            todo.extend(edges.get(n).into_iter().flatten());
        }
    }
    seen
}

/// The shortest cycle in `edges` (breadth first from each node back to itself).
fn shortest_cycle(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Option<Vec<ModPath>> {
    let mut best: Option<Vec<ModPath>> = None;
    for start in edges.keys() {
        let mut came_from: BTreeMap<&ModPath, &ModPath> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        'search: while let Some(n) = queue.pop_front() {
            for next in edges.get(n).into_iter().flatten() {
                if next == start {
                    let mut path = vec![start.clone()];
                    let mut at = n;
                    while at != start {
                        path.push(at.clone());
                        at = came_from[at];
                    }
                    path.push(start.clone());
                    path.reverse();
                    if best.as_ref().is_none_or(|b| path.len() < b.len()) {
                        best = Some(path);
                    }
                    break 'search;
                }
                if !came_from.contains_key(next) {
                    came_from.insert(next, n);
                    queue.push_back(next);
                }
            }
        }
    }
    best
}

pub fn find_cycle(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Option<Vec<ModPath>> {
    fn visit(
        node: &ModPath,
        edges: &BTreeMap<ModPath, BTreeSet<ModPath>>,
        path: &mut Vec<ModPath>,
        done: &mut BTreeSet<ModPath>,
    ) -> Option<Vec<ModPath>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

/// What a name or path stands for, as far as the module graph cares.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    Module(ModPath),
    /// An item (or something inside one: a variant, a method) of this module.
    Item(ModPath),
    /// Outside the crate (`std::…`, another crate) or nothing the scan knows (`T::new`).
    Outside,
}

impl Found {
    fn module(self) -> Option<ModPath> {
        match self {
            Found::Module(m) | Found::Item(m) => Some(m),
            Found::Outside => None,
        }
    }
}

/// Name resolution over the scanned modules: children, items defined, `use` bindings and `use
/// …::*` globs, so an imported or re-exported name leads to the module that defines it (`use
/// super::X` where the parent only re-exports `X` from a leaf is a use of the leaf).
struct Names<'a> {
    modules: &'a BTreeMap<ModPath, Module>,
    refs: &'a BTreeMap<ModPath, Refs>,
}

/// Deep enough for any real chain of re-exports; a `use` loop stops here.
const MAX_DEPTH: usize = 16;

impl Names<'_> {
    /// What `path`, written in `module`, names.
    fn path(&self, module: &ModPath, path: &[String], depth: usize) -> Found {
        let Some(first) = path.first() else {
            return Found::Outside;
        };
        let (mut found, rest) = match first.as_str() {
            "crate" => (Found::Module(Vec::new()), &path[1..]),
            "self" => (Found::Module(module.clone()), &path[1..]),
            "super" => {
                let mut base = module.clone();
                let ups = path.iter().take_while(|s| *s == "super").count();
                for _ in 0..ups {
                    if base.pop().is_none() {
                        return Found::Outside;
                    }
                }
                (Found::Module(base), &path[ups..])
            }
            name => match self.name(module, name, depth) {
                // A first segment the crate does not define is another crate, a type parameter…
                None => return Found::Outside,
                Some(f) => (f, &path[1..]),
            },
        };
        for seg in rest {
            let Found::Module(base) = &found else { break };
            found = match self.name(base, seg, depth) {
                Some(f) => f,
                // Something of `base` the scan cannot see (a macro's item): `base` is used.
                None => Found::Item(base.clone()),
            };
        }
        found
    }

    /// What `name` means inside `module`; `None` when nothing there binds it.
    fn name(&self, module: &ModPath, name: &str, depth: usize) -> Option<Found> {
        let mut child = module.clone();
        child.push(name.to_string());
        if self.modules.contains_key(&child) {
            return Some(Found::Module(child));
        }
        let refs = self.refs.get(module)?;
        if refs.defs.contains(name) {
            return Some(Found::Item(module.clone()));
        }
        if depth >= MAX_DEPTH {
            return Some(Found::Item(module.clone()));
        }
        if let Some(alias) = refs.aliases.get(name) {
            return Some(self.path(module, alias, depth + 1));
        }
        refs.globs
            .iter()
            .find_map(|glob| match self.path(module, glob, depth + 1) {
                Found::Module(g) if g != *module => self.name(&g, name, depth + 1),
                _ => None,
            })
    }
}

/// Reads one file of module `p`: records the modules it declares (inline ones at once, file ones
/// returned to be read) and every path it writes.
fn scan(
    text: &str,
    p: &Pending,
    graph: &mut Graph,
    refs: &mut BTreeMap<ModPath, Refs>,
) -> Vec<Pending> {
    let toks = lex(text);
    graph
        .modules
        .insert(p.path.clone(), Module { test: p.test });
    // Where this file's child module files live: beside a `lib.rs`/`mod.rs`, else in a directory
    // named after the file.
    let name = p.file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let dir = p.file.parent().unwrap_or(Path::new("")).to_path_buf();
    let child_dir = if matches!(name, "lib.rs" | "main.rs" | "mod.rs") {
        dir.clone()
    } else {
        dir.join(name.trim_end_matches(".rs"))
    };
    // (module path, test, brace depth it opened at, directory of its child files)
    let mut stack: Vec<(ModPath, bool, usize, PathBuf)> =
        vec![(p.path.clone(), p.test, 0, child_dir)];
    let mut depth = 0usize;
    let mut files = Vec::new();
    let mut attr_path: Option<String> = None;
    let mut attr_test = false;
    let mut i = 0;
    let ident = |k: usize| match toks.get(k) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    while i < toks.len() {
        let (module, test, _, child_dir) = stack.last().cloned().expect("the file's module");
        // Attributes apply to the next item: past anything but a visibility, they are spent.
        let visibility = match &toks[i] {
            Tok::Ident(w) => matches!(
                w.as_str(),
                "pub" | "crate" | "super" | "self" | "in" | "mod"
            ),
            Tok::Punct(c) => matches!(c, '(' | ')' | '#'),
            _ => false,
        };
        if !visibility {
            attr_test = false;
            attr_path = None;
        }
        match &toks[i] {
            Tok::Punct('#') if toks.get(i + 1) == Some(&Tok::Punct('[')) => {
                // `#[path = "x.rs"]` and `#[cfg(test)]` apply to the next `mod`.
                match (ident(i + 2), toks.get(i + 3), toks.get(i + 4)) {
                    (Some("path"), Some(Tok::Punct('=')), Some(Tok::Str(s))) => {
                        attr_path = Some(s.clone());
                    }
                    (Some("cfg"), Some(Tok::Punct('(')), _)
                        if ident(i + 4) == Some("test")
                            && toks.get(i + 5) == Some(&Tok::Punct(')')) =>
                    {
                        attr_test = true;
                    }
                    _ => {}
                }
                // Skip the attribute; its brackets may nest.
                let mut level = 0usize;
                i += 1;
                while i < toks.len() {
                    match toks[i] {
                        Tok::Punct('[') => level += 1,
                        Tok::Punct(']') => {
                            level -= 1;
                            if level == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                i += 1;
                continue;
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let Some(name) = ident(i + 1) {
                    let mut path = module.clone();
                    path.push(name.to_string());
                    let child_test = test || attr_test;
                    match toks.get(i + 2) {
                        Some(Tok::Punct(';')) => {
                            let file = match attr_path.take() {
                                // `#[path]` outside inline blocks is relative to the file's dir.
                                Some(rel) => dir.join(rel),
                                None => {
                                    let flat = child_dir.join(format!("{name}.rs"));
                                    if flat.exists() {
                                        flat
                                    } else {
                                        child_dir.join(name).join("mod.rs")
                                    }
                                }
                            };
                            files.push(Pending {
                                path,
                                file,
                                test: child_test,
                            });
                            i += 3;
                        }
                        Some(Tok::Punct('{')) => {
                            assert!(attr_path.is_none(), "#[path] on an inline module");
                            graph
                                .modules
                                .insert(path.clone(), Module { test: child_test });
                            depth += 1;
                            let dir = child_dir.join(name);
                            stack.push((path, child_test, depth, dir));
                            i += 3;
                        }
                        _ => i += 1,
                    }
                    attr_test = false;
                    continue;
                }
                i += 1;
            }
            Tok::Ident(kw) if kw == "use" => {
                let mut trees = Vec::new();
                i = use_tree(&toks, i + 1, Vec::new(), &mut trees);
                let r = refs.entry(module.clone()).or_default();
                for (path, bound) in trees {
                    match bound {
                        Bound::Name(name) => {
                            r.aliases.insert(name, path.clone());
                        }
                        Bound::Glob => r.globs.push(path.clone()),
                        Bound::Nothing => {}
                    }
                    r.paths.push(path);
                }
            }
            Tok::Ident(kw)
                if matches!(
                    kw.as_str(),
                    "struct" | "enum" | "union" | "trait" | "type" | "fn" | "const" | "static"
                ) && ident(i + 1).is_some() =>
            {
                let name = ident(i + 1).unwrap_or_default().to_string();
                refs.entry(module.clone()).or_default().defs.insert(name);
                i += 1;
            }
            Tok::Ident(kw) if kw == "macro_rules" && toks.get(i + 1) == Some(&Tok::Punct('!')) => {
                if let Some(name) = ident(i + 2) {
                    refs.entry(module.clone())
                        .or_default()
                        .defs
                        .insert(name.to_string());
                }
                i += 2;
            }
            Tok::Ident(first)
                if toks.get(i + 1) == Some(&Tok::PathSep)
                    && !matches!(i.checked_sub(1).map(|k| &toks[k]), Some(Tok::PathSep)) =>
            {
                let mut path = vec![first.clone()];
                let mut k = i + 1;
                while toks.get(k) == Some(&Tok::PathSep) {
                    match ident(k + 1) {
                        Some(seg) => path.push(seg.to_string()),
                        None => break,
                    }
                    k += 2;
                }
                refs.entry(module.clone()).or_default().paths.push(path);
                i = k;
            }
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if stack.len() > 1 && stack.last().is_some_and(|s| s.2 == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    files
}

/// What one path of a `use` binds.
#[derive(Debug)]
enum Bound {
    Name(String),
    Glob,
    /// `use x as _;`
    Nothing,
}

/// Reads the tree of a `use` from `toks[i]` up to its `;`; pushes each imported path and what
/// it binds. Returns the index after the `;`.
fn use_tree(
    toks: &[Tok],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Bound)>,
) -> usize {
    loop {
        match toks.get(i) {
            None => return i,
            Some(Tok::PathSep) => i += 1,
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        None => return i,
                        Some(Tok::Punct('}')) => {
                            i += 1;
                            break;
                        }
                        Some(Tok::Punct(',')) => i += 1,
                        _ => i = use_tree(toks, i, prefix.clone(), out),
                    }
                }
                return finish(toks, i);
            }
            Some(Tok::Punct('*')) => {
                out.push((prefix, Bound::Glob));
                return finish(toks, i + 1);
            }
            Some(Tok::Ident(name)) => {
                if toks.get(i + 1) == Some(&Tok::PathSep) {
                    prefix.push(name.clone());
                    i += 2;
                    continue;
                }
                let bound = if name == "self" {
                    prefix.last().cloned()
                } else {
                    prefix.push(name.clone());
                    Some(name.clone())
                };
                i += 1;
                let bound = match (ident_at(toks, i), toks.get(i + 1)) {
                    (Some("as"), Some(Tok::Ident(alias))) => {
                        i += 2;
                        if alias == "_" {
                            Bound::Nothing
                        } else {
                            Bound::Name(alias.clone())
                        }
                    }
                    _ => bound.map_or(Bound::Nothing, Bound::Name),
                };
                out.push((prefix, bound));
                return finish(toks, i);
            }
            Some(_) => return finish(toks, i + 1),
        }
    }
}

fn ident_at(toks: &[Tok], i: usize) -> Option<&str> {
    match toks.get(i) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// After one tree: inside braces stop at `,`/`}`, at the top level step past the `;`.
fn finish(toks: &[Tok], i: usize) -> usize {
    match toks.get(i) {
        Some(Tok::Punct(';')) => i + 1,
        _ => i,
    }
}
