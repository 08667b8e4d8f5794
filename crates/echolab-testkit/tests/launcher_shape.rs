//! The launcher's shape, checked on every test run (docs/architecture.md, "Data flow" and
//! "Backends"): echolab-up reaches the runtime only through its one deploy interface
//! (`echolab_runtime::deploy`, with `hosts`, `settle` and the other modules outside
//! `docker`), never the runtime's Docker modules; and no function in echolab-up's sources is
//! longer than [`MAX_FN_LINES`], so that `app::run_once` and the stages it calls each read on
//! one screen.
//!
//! Both are read from the source text: imports as the paths it names (comments left out),
//! functions from their `fn` line to the closing brace at the same indentation, as rustfmt
//! lays them out.

use std::path::{Path, PathBuf};

/// Most lines a function of echolab-up may have, its signature and closing brace included.
const MAX_FN_LINES: usize = 80;

/// Files whose functions are not held to [`MAX_FN_LINES`] yet. Each entry must still hold a
/// function that is too long, so that the list is emptied as soon as it can be.
const LONG_FUNCTIONS_BEING_REWRITTEN: &[&str] = &[];

fn launcher_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../echolab-up/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// `text` without its comments (line comments and doc comments), whitespace removed, so that
/// a path is found however it is wrapped.
fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<String>()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// Whether `code` (from [`code_only`]) names anything under `echolab_runtime::docker`: the
/// path itself, or `docker` at the top of a `use echolab_runtime::{...}` group.
fn names_runtime_docker(code: &str) -> bool {
    if code.contains("echolab_runtime::docker") {
        return true;
    }
    code.match_indices("echolab_runtime::{").any(|(at, open)| {
        let rest = &code[at + open.len()..];
        // The group's top-level items only: a nested `x::{docker}` is not the runtime's.
        let (mut depth, mut item) = (0usize, String::new());
        for c in rest.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => return item.starts_with("docker"),
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    if item.starts_with("docker") {
                        return true;
                    }
                    item.clear();
                    continue;
                }
                _ => {}
            }
            if depth == 0 {
                item.push(c);
            }
        }
        false
    })
}

/// Each function of `text`: its name, first line (1-based) and length in lines.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let Some(name) = fn_name(trimmed) else {
            continue;
        };
        let close = format!("{}}}", " ".repeat(indent));
        let end = lines[i..].iter().position(|l| {
            *l == close || (l.len() - l.trim_start().len() == indent && l.trim_end().ends_with(';'))
        });
        match end {
            // A declaration without a body (a trait's) ends in `;` on its own indentation.
            Some(n) if lines[i + n].trim_end().ends_with(';') => {}
            Some(n) => out.push((name, i + 1, n + 1)),
            None => {}
        }
    }
    out
}

/// The name of the function a line starts, if it starts one (`pub(crate) async fn run(`).
fn fn_name(trimmed: &str) -> Option<String> {
    let mut words = trimmed.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        if w.starts_with("pub") || ["async", "const", "unsafe", "extern", "\"C\""].contains(w) {
            words.next();
        } else {
            break;
        }
    }
    if words.next()? != "fn" {
        return None;
    }
    let rest = words.next()?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The breaches of both rules in echolab-up's sources, relative to its `src`.
fn breaches() -> (Vec<String>, Vec<String>) {
    let src = launcher_src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let (mut imports, mut long) = (Vec::new(), Vec::new());
    for path in files {
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        let rel = path
            .strip_prefix(&src)
            .expect("under src")
            .display()
            .to_string();
        if names_runtime_docker(&code_only(&text)) {
            imports.push(rel.clone());
        }
        for (name, line, len) in functions(&text) {
            if len > MAX_FN_LINES {
                long.push(format!("{rel}:{line}: fn {name} is {len} lines"));
            }
        }
    }
    (imports, long)
}

#[test]
fn the_launcher_imports_nothing_of_the_runtimes_docker_modules() {
    let (imports, _) = breaches();
    assert!(
        imports.is_empty(),
        "echolab-up reaches into echolab_runtime::docker (use echolab_runtime::deploy, \
         re-exporting there what the launcher needs): {imports:?}"
    );
}

#[test]
fn no_function_of_the_launcher_is_over_80_lines() {
    let (_, long) = breaches();
    let is_exempt = |b: &String| {
        LONG_FUNCTIONS_BEING_REWRITTEN
            .iter()
            .any(|f| b.starts_with(&format!("{f}:")))
    };
    let new: Vec<&String> = long.iter().filter(|b| !is_exempt(b)).collect();
    assert!(new.is_empty(), "over {MAX_FN_LINES} lines:\n{new:#?}");
    let gone: Vec<&&str> = LONG_FUNCTIONS_BEING_REWRITTEN
        .iter()
        .filter(|f| !long.iter().any(|b| b.starts_with(&format!("{f}:"))))
        .collect();
    assert!(
        gone.is_empty(),
        "no longer over {MAX_FN_LINES} lines, so delete from LONG_FUNCTIONS_BEING_REWRITTEN: {gone:?}"
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    // The readers themselves, on text made to breach each rule.
    assert!(names_runtime_docker(&code_only(
        "use echolab_runtime::docker::engine;"
    )));
    assert!(names_runtime_docker(&code_only(
        "use echolab_runtime::{\n    deploy::Hosts,\n    docker::cleanup,\n};"
    )));
    assert!(!names_runtime_docker(&code_only(
        "use echolab_runtime::{deploy::{self, Docker}, hosts::Hosts};\n// echolab_runtime::docker"
    )));
    let body: String = (0..90).map(|i| format!("    let x{i} = {i};\n")).collect();
    let text = format!("pub(crate) async fn long(a: u8) -> u8 {{\n{body}    a\n}}\n\ntrait T {{\n    fn f(&self);\n}}\n");
    assert_eq!(functions(&text), [("long".to_string(), 1, 93)]);
}
