//! The workspace's layout rules, checked on every test run: no source file under
//! `crates/*/src` and no test file under `crates/*/tests` is over 800 lines, and within each
//! crate no two modules import each other, directly or round a longer circle
//! (docs/architecture.md, "Crates").
//!
//! The import graph is read from the source text: each module (a file; `#[cfg(test)]` items
//! left out, since tests reach into what they test) points at every module that its `use`
//! declarations and the paths in its code name. A path leads to the deepest module it names:
//! `crate::wire::pump::Pump` to `wire::pump`, `super::Argv` to the parent (when `Argv` is an
//! item there). Declaring a child (`mod child;`) is not an import; using what it declares
//! (`pub use child::Item`, `child::run()`) is. A module using what one of its ancestors holds
//! (a `mod.rs` with the types its children share) is not counted: the ancestor is the
//! namespace the module lives in, not a module beside it.
//!
//! [`BEING_FIXED`] lists what other branches are fixing at the time of writing; each entry
//! must still be true, so that the list is emptied as they land.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Most lines a source or test file may have.
const MAX_LINES: usize = 800;

/// Breaches of these rules that another branch is removing, as the checks below word them,
/// relative to `crates/`.
/// An entry that no longer holds fails the test: delete it.
const BEING_FIXED: &[&str] = &[];

/// Fails with the `found` breaches that [`BEING_FIXED`] does not list, and with the entries of
/// [`BEING_FIXED`] that `kind` (a prefix every entry of that kind has) no longer finds.
fn check(found: Vec<String>, is_kind: impl Fn(&str) -> bool, what: &str) {
    let known: Vec<&str> = BEING_FIXED.iter().copied().filter(|e| is_kind(e)).collect();
    let new: Vec<&String> = found
        .iter()
        .filter(|f| !known.contains(&f.as_str()))
        .collect();
    let gone: Vec<&&str> = known
        .iter()
        .filter(|k| !found.iter().any(|f| f == *k))
        .collect();
    assert!(
        new.is_empty(),
        "{what}:\n{}",
        new.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        gone.is_empty(),
        "fixed, so delete from BEING_FIXED in {}: {gone:?}",
        file!()
    );
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The `name` directories (`src`, `tests`) of the workspace's crates that have one.
fn crate_dirs(name: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(crates_dir())
        .unwrap()
        .map(|e| e.unwrap().path().join(name))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The `src` directories of the workspace's crates.
fn crate_sources() -> Vec<PathBuf> {
    let dirs = crate_dirs("src");
    assert!(dirs.len() >= 7, "only {} crates found", dirs.len());
    dirs
}

/// The `.rs` files under `dirs`, at any depth, that are over [`MAX_LINES`] lines, each as
/// `PATH (N lines)`, PATH relative to `base`.
fn long_files(dirs: &[PathBuf], base: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(dir, &mut files);
    }
    files
        .iter()
        .map(|f| (f, std::fs::read_to_string(f).unwrap().lines().count()))
        .filter(|(_, n)| *n > MAX_LINES)
        .map(|(f, n)| {
            let rel = f.strip_prefix(base).unwrap_or(f);
            format!("{} ({n} lines)", rel.display())
        })
        .collect()
}

#[test]
fn no_source_file_is_over_800_lines() {
    check(
        long_files(&crate_sources(), &crates_dir()),
        |e| e.ends_with(" lines)") && e.contains("/src/"),
        &format!("source files over {MAX_LINES} lines"),
    );
}

#[test]
fn no_test_file_under_crates_tests_is_over_800_lines() {
    let dirs = crate_dirs("tests");
    // Most crates have integration tests; finding few means the walk looks in the wrong place
    // and would pass whatever the files hold.
    assert!(
        dirs.len() >= 5,
        "only {} tests directories found",
        dirs.len()
    );
    check(
        long_files(&dirs, &crates_dir()),
        |e| e.ends_with(" lines)") && e.contains("/tests/"),
        &format!("test files over {MAX_LINES} lines"),
    );
}

/// The line count on made-up files: a long test module deep under `tests/` is found, one at the
/// limit and a long file that is not Rust are not.
#[test]
fn the_line_count_finds_a_long_test_module_at_any_depth() {
    let tmp = echolab_testkit::TempDir::new("layout-lines");
    let tests = tmp.path().join("krate/tests");
    std::fs::create_dir_all(tests.join("big/deeper")).unwrap();
    let lines = |n: usize| "x\n".repeat(n);
    std::fs::write(tests.join("big.rs"), lines(MAX_LINES)).unwrap();
    std::fs::write(tests.join("big/deeper/part.rs"), lines(MAX_LINES + 1)).unwrap();
    std::fs::write(tests.join("big/data.txt"), lines(MAX_LINES + 1)).unwrap();
    assert_eq!(
        long_files(&[tests], tmp.path()),
        [format!(
            "krate/tests/big/deeper/part.rs ({} lines)",
            MAX_LINES + 1
        )]
    );
}

/// `path` relative to `crates/`.
fn relative(path: &Path) -> PathBuf {
    let base = crates_dir().canonicalize().unwrap();
    path.canonicalize()
        .unwrap()
        .strip_prefix(&base)
        .unwrap()
        .to_path_buf()
}

/// Source text without comments, string and char literals (their contents become spaces), so
/// that a path in a doc comment or a message is not read as an import.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            out.extend(rest[..end].chars().filter(|&c| c == '\n'));
            i += end;
        } else if let Some(end) = raw_string_end(rest) {
            out.extend(rest[..end].chars().filter(|&c| c == '\n'));
            i += end;
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            out.extend(rest[..j.min(rest.len())].chars().filter(|&c| c == '\n'));
            out.push(' ');
            i += (j + 1).min(rest.len());
        } else if let Some(end) = char_literal_end(rest) {
            out.push(' ');
            i += end;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`, `br"..."`) at the start of `s`.
fn raw_string_end(s: &str) -> Option<usize> {
    let body = s.strip_prefix("br").or_else(|| s.strip_prefix('r'))?;
    let hashes = body.len() - body.trim_start_matches('#').len();
    let open = &body[hashes..];
    if !open.starts_with('"') {
        return None;
    }
    let close = format!("\"{}", "#".repeat(hashes));
    let end = open[1..].find(&close)? + 1 + close.len();
    Some(s.len() - open.len() + end)
}

/// The length of a char literal (`'a'`, `'\n'`, `'\''`) at the start of `s`; `None` for a
/// lifetime (`'a`).
fn char_literal_end(s: &str) -> Option<usize> {
    let mut chars = s.char_indices().skip(1);
    let (_, c) = chars.next()?;
    if c == '\\' {
        let close = s[2..].find('\'')?;
        // '\'' : the quote right after the backslash is escaped.
        let close = if close == 0 {
            s[3..].find('\'')? + 1
        } else {
            close
        };
        return Some(2 + close + 1);
    }
    let (j, q) = chars.next()?;
    (q == '\'').then_some(j + 1)
}

/// `code` without the `#[cfg(test)]` items (a `mod tests { ... }` block, a test-only `use` or
/// function), which may import anything they test.
fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item ends at the `;` or at the brace that closes its first `{`, whichever comes first.
        let semi = after.find(';');
        let brace = after.find('{');
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = after.len();
                for (k, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (Some(s), None) => s + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Expands a use tree (`a::{b, c::{d, e}}`, `self`, globs, `as` renames) into its paths.
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    // Renames (`B as Bee`) go first, then whitespace.
    let mut t = tree.to_string();
    while let Some(at) = find_word(&t, "as") {
        let rest = &t[at + 2..];
        let name = rest.trim_start();
        let len = name
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(name.len());
        let end = t.len() - name.len() + len;
        t.replace_range(at..end, "");
    }
    let t: String = t.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    expand_into(&t, &mut Vec::new(), &mut out);
    out
}

fn expand_into(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let segments = |s: &str| -> Vec<String> {
        s.split("::")
            .filter(|s| !s.is_empty() && *s != "*" && *s != "self")
            .map(String::from)
            .collect()
    };
    if let Some(open) = tree.find('{') {
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let depth = prefix.len();
        prefix.extend(segments(&tree[..open]));
        // `a::{self, b}` names `a` itself too.
        out.push(prefix.clone());
        for part in split_top_level(inner) {
            expand_into(part, prefix, out);
        }
        prefix.truncate(depth);
    } else {
        let mut full = prefix.clone();
        full.extend(segments(tree));
        if !full.is_empty() {
            out.push(full);
        }
    }
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Every path a module's code names: its `use` declarations, expanded, and the paths
/// written inline.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let after = &rest[at + 3..];
        let end = after.find(';').unwrap_or(after.len());
        paths.extend(expand_use_tree(&after[..end]));
        rest = &after[end..];
    }
    // Inline paths (`crate::a::f()`, `super::B`, `child::serve(ctx)`): every `x::y` chain that
    // does not continue another one; [`target`] keeps those that lead into this crate.
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(at) = code[from..].find("::") {
        let sep = from + at;
        from = sep + 2;
        let start = code[..sep]
            .rfind(|c: char| !is_ident(c))
            .map_or(0, |i| i + 1);
        if start == sep || code[..start].ends_with("::") {
            continue;
        }
        let end = code[start..]
            .find(|c: char| !(is_ident(c) || c == ':'))
            .map_or(code.len(), |e| start + e);
        from = end.max(from);
        paths.push(
            code[start..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
        );
    }
    paths
}

/// Where `word` occurs as a whole word in `s`.
fn find_word(s: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = s[from..].find(word) {
        let i = from + at;
        let before = s[..i].chars().next_back();
        let after = s[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !ident(before) && !ident(after) {
            return Some(i);
        }
        from = i + word.len();
    }
    None
}

/// A module's path from the crate root, from its file: `lib.rs` → `[]`, `a/mod.rs` and `a.rs`
/// → `[a]`, `a/b.rs` → `[a, b]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The deepest module among `modules` that `path`, written in module `from`, names; `None` for
/// a path into another crate.
fn target(
    modules: &BTreeSet<Vec<String>>,
    from: &[String],
    path: &[String],
) -> Option<Vec<String>> {
    let mut base: Vec<String> = from.to_vec();
    let mut segs = path;
    match segs.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            segs = &segs[1..];
        }
        Some("self") => segs = &segs[1..],
        Some("super") => {
            while segs.first().map(String::as_str) == Some("super") {
                base.pop()?;
                segs = &segs[1..];
            }
        }
        Some(first) => {
            // A 2018-edition relative path starts with a child module of `from`.
            let mut child = base.clone();
            child.push(first.to_string());
            if !modules.contains(&child) {
                return None;
            }
        }
        None => return None,
    }
    let mut found = base.clone();
    for s in segs {
        let mut next = found.clone();
        next.push(s.clone());
        if modules.contains(&next) {
            found = next;
        } else {
            break;
        }
    }
    Some(found)
}

/// The circles (strongly connected components of more than one module) of an import graph,
/// each sorted and all in order, by Tarjan's algorithm.
fn circles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g Vec<String>, usize>,
        low: BTreeMap<&'g Vec<String>, usize>,
        stack: Vec<&'g Vec<String>>,
        on_stack: BTreeSet<&'g Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g Vec<String>) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}

/// The import graph of the library (or binary) rooted at `root` in `src`: one node per file
/// module, `main.rs` and `lib.rs` being separate crates.
fn import_graph(src: &Path, files: &[PathBuf]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut graph = BTreeMap::new();
    for f in files {
        let from = module_of(src, f);
        let code = without_test_items(&code_only(&std::fs::read_to_string(f).unwrap()));
        let edges: BTreeSet<Vec<String>> = named_paths(&code)
            .iter()
            .filter_map(|p| target(&modules, &from, p))
            // Neither the module itself nor one of its ancestors (`t` a prefix of `from`).
            .filter(|t| !from.starts_with(t))
            .collect();
        graph.insert(from, edges);
    }
    graph
}

/// The files of the crate at `src` that belong to its library (everything but `main.rs`).
fn library_files(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| f.file_name().is_some_and(|n| n != "main.rs"));
    files
}

#[test]
fn no_module_imports_form_a_circle() {
    let mut found = Vec::new();
    for src in crate_sources() {
        let graph = import_graph(&src, &library_files(&src));
        for circle in circles(&graph) {
            let names: Vec<String> = circle
                .iter()
                .map(|m| {
                    if m.is_empty() {
                        "<root>".into()
                    } else {
                        m.join("::")
                    }
                })
                .collect();
            let krate = relative(&src);
            let krate = krate.parent().unwrap().display();
            found.push(format!("{krate}: {}", names.join(" <-> ")));
        }
    }
    check(found, |e| e.contains(" <-> "), "import circles");
}

/// The checker on made-up modules: it must see a circle, or it proves nothing.
#[test]
fn the_checker_sees_circles_and_ignores_comments_strings_and_tests() {
    let dir = std::env::temp_dir().join(format!("echolab-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("w")).unwrap();
    let write = |p: &str, text: &str| std::fs::write(dir.join(p), text).unwrap();
    write("lib.rs", "pub mod w;\npub mod c;\n");
    write(
        "w/mod.rs",
        "mod a;\nmod b;\nmod c;\nmod d;\nfn f() { d::h() }\n",
    );
    write("w/a.rs", "use super::b::{self, B as Bee};\n/// [`crate::w::c`]\nfn f() { let _ = \"crate::w::c\"; }\n");
    write(
        "w/b.rs",
        "pub struct B;\nfn g() { crate::w::a::f(); super::f(); crate::f() }\n",
    );
    write(
        "w/d.rs",
        "fn h() { super::super::c::k(); Vec::<u8>::new(); }\n",
    );
    write(
        "w/c.rs",
        "#[cfg(test)]\nmod tests {\n    use crate::w::a;\n}\n",
    );
    write("c.rs", "use std::fmt;\nuse crate::w::{self};\n");
    let files = library_files(&dir);
    let graph = import_graph(&dir, &files);
    let m = |s: &str| -> Vec<String> {
        s.split("::")
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    assert_eq!(graph[&m("w::a")], [m("w::b")].into_iter().collect());
    assert_eq!(
        graph[&m("w::c")],
        BTreeSet::new(),
        "test modules import freely"
    );
    assert_eq!(
        graph[&m("w::b")],
        [m("w::a")].into_iter().collect(),
        "what an ancestor holds does not count"
    );
    assert_eq!(
        graph[&m("w")],
        [m("w::d")].into_iter().collect(),
        "relative paths"
    );
    assert_eq!(graph[&m("c")], [m("w")].into_iter().collect());
    // c -> w -> w::d -> c, and w::a <-> w::b.
    assert_eq!(
        circles(&graph),
        vec![vec![m("c"), m("w"), m("w::d")], vec![m("w::a"), m("w::b")]]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
