//! No two source files of echo-server import each other, directly or through others (issue 14,
//! part 4: `readiness/scan.rs` and `models/mod.rs` once did). A cycle means neither file can be
//! read, changed or tested without the other.
//!
//! The graph: one node per source file; an edge from a module's file to each submodule's file
//! (it declares and drives them), and from a file to every file whose items it names through a
//! `crate::`, `super::` or `self::` path (in `use` trees or in code; comments are ignored). A
//! path resolves to the file of its longest prefix that is a module. `#[cfg(test)]` modules
//! inside a file count as that file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Module path of each `.rs` file under `src` (the library's root is `lib.rs`; the binary's
/// `main.rs` is another crate and is left out).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut m: Module = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            match m.last().map(String::as_str) {
                Some("lib") if m.len() == 1 => m.clear(),
                Some("main") if m.len() == 1 => continue,
                Some("mod") => {
                    m.pop();
                }
                _ => {}
            }
            if path.extension().is_some_and(|e| e == "rs") {
                out.insert(m, path);
            }
        }
    }
    out
}

/// `text` without `//` comments (doc comments included) and with every `use` tree expanded
/// into one path per leaf (`a::{b, c::d}` → `a::b a::c::d`).
fn code_paths(text: &str) -> String {
    let code: String = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("use ") {
        let word_start = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
        out.push_str(&rest[..i]);
        rest = &rest[i + 4..];
        if !word_start {
            out.push_str("use ");
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        // Spaces kept only around `as`: `a::{b as c}` has leaf `a::b`.
        let tree = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        let tree = [
            (" ::", "::"),
            (":: ", "::"),
            ("{ ", "{"),
            (" }", "}"),
            (", ", ","),
            (" ,", ","),
        ]
        .iter()
        .fold(tree, |t, (from, to)| t.replace(from, to));
        for p in expand("", &tree) {
            out.push(' ');
            out.push_str(&p);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The leaf paths of the use tree `tree` (spaces only around `as`), each prefixed by `prefix`.
fn expand(prefix: &str, tree: &str) -> Vec<String> {
    let join = |p: &str| {
        let p = p.split(" as ").next().unwrap_or(p);
        let p = p.trim_end_matches("::self").trim_end_matches("::*");
        if prefix.is_empty() {
            p.to_string()
        } else if p == "self" {
            prefix.to_string()
        } else {
            format!("{prefix}::{p}")
        }
    };
    let Some(open) = tree.find('{') else {
        return vec![join(tree)];
    };
    let head = join(tree[..open].trim_end_matches("::"));
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&head, p))
        .collect()
}

/// The file-to-file edges of the crate whose sources are in `src`.
fn edges(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules(src);
    let resolve = |abs: &[String]| -> Option<Module> {
        (0..=abs.len())
            .rev()
            .map(|n| abs[..n].to_vec())
            .find(|m| mods.contains_key(m))
    };
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, path) in &mods {
        let text = std::fs::read_to_string(path).unwrap();
        let deps = graph.entry(m.clone()).or_default();
        // An inline `#[cfg(test)] mod NAME {` block is a child of this file's module.
        let split = text.find("#[cfg(test)]\nmod ").unwrap_or(text.len());
        for (part, base) in [
            (&text[..split], m.clone()),
            (&text[split..], {
                let mut b = m.clone();
                b.push("tests".into());
                b
            }),
        ] {
            let code = code_paths(part);
            for token in code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
                let segs: Vec<&str> = token.split("::").collect();
                if segs.len() < 2 {
                    // `pub(crate)`, `pub(super)`, a method's `self`: not a path to an item.
                    continue;
                }
                let mut abs: Module = match segs[0] {
                    "crate" => Vec::new(),
                    "self" => base.clone(),
                    "super" => base.clone(),
                    _ => continue,
                };
                let mut rest = &segs[1..];
                if segs[0] == "super" {
                    abs.pop();
                    while rest.first() == Some(&"super") {
                        abs.pop();
                        rest = &rest[1..];
                    }
                }
                abs.extend(rest.iter().filter(|s| !s.is_empty()).map(|s| s.to_string()));
                if let Some(target) = resolve(&abs) {
                    if &target != m {
                        deps.insert(target);
                    }
                }
            }
        }
    }
    for m in mods.keys() {
        if let Some((_, parent)) = m.split_last() {
            if let Some(p) = resolve(parent) {
                graph.entry(p).or_default().insert(m.clone());
            }
        }
    }
    graph
}

/// The cycles of `graph`: its strongly connected components of more than one node (Tarjan).
fn cycles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, (usize, usize)>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g Module) {
        let i = s.index.len();
        s.index.insert(v, (i, i));
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.index[w].1.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            } else if s.on_stack.contains(w) {
                let low = s.index[w].0.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.clone());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn names(scc: &[Module]) -> Vec<String> {
    let mut n: Vec<String> = scc
        .iter()
        .map(|m| {
            if m.is_empty() {
                "crate".into()
            } else {
                m.join("::")
            }
        })
        .collect();
    n.sort();
    n
}

#[test]
fn no_module_imports_form_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = edges(&src);
    assert!(
        graph.contains_key(&vec!["readiness".to_string(), "scan".to_string()]),
        "the walk found the sources"
    );
    let found: Vec<Vec<String>> = cycles(&graph).iter().map(|c| names(c)).collect();
    assert!(
        found.is_empty(),
        "modules that import each other: {found:?}"
    );
}

/// The detector on a made-up crate with the shape of the old cycle: `readiness/scan.rs` naming
/// an item of `models/mod.rs`, whose submodule `select` uses `scan`.
#[test]
fn a_child_importing_back_through_a_sibling_is_a_cycle() {
    let dir = std::env::temp_dir().join(format!("echo-server-module-graph-{}", std::process::id()));
    let files = [
        ("lib.rs", "mod counters;\nmod models;\nmod readiness;\n"),
        (
            "models/mod.rs",
            "mod select;\n/// crate::readiness in a comment is not an edge\npub struct Ctx;\n",
        ),
        (
            "models/select.rs",
            "use crate::readiness::scan::{self, Scanner};\n",
        ),
        ("readiness/mod.rs", "pub mod scan;\n"),
        ("counters.rs", "pub struct Counter;\n"),
        (
            "readiness/scan.rs",
            "use crate::{models::Ctx as C, counters};\npub trait Scanner {}\n",
        ),
    ];
    for (name, text) in files {
        let p = dir.join("src").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let found: Vec<Vec<String>> = cycles(&edges(&dir.join("src")))
        .iter()
        .map(|c| names(c))
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        vec![vec!["models", "models::select", "readiness::scan"]]
    );
}
