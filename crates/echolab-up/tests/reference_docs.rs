//! The per-binary reference pages (docs/reference/<binary>.md) hold each binary's `--help`
//! between marker comments, written by `scripts/reference-docs`. These tests run every binary
//! as that script does (COLUMNS=100, an otherwise empty environment, this checkout's path as
//! `<repo>`) and compare, so a page cannot drift from its clap definition: when one fails,
//! rebuild and rerun the script (`cargo build --bins && scripts/reference-docs`).
//!
//! echolab-up's binary is this crate's own; the others are found beside it in the same target
//! directory ([`echolab_testkit::workspace_bin`] refuses one older than its sources).

use std::path::{Path, PathBuf};
use std::process::Command;

const BEGIN: &str = "<!-- help:begin: written by scripts/reference-docs; do not edit by hand -->";
const END: &str = "<!-- help:end -->";

/// Subcommands a binary dispatches before clap sees its arguments, so its help lists none.
fn extra_subcommands(name: &str) -> &'static [&'static str] {
    match name {
        "echolab-report" => &["compare", "bundle"],
        _ => &[],
    }
}

fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// `bin ARGS --help` as the reference pages show it.
fn help_text(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .arg("--help")
        .env_clear()
        .env("COLUMNS", "100")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap_or_else(|e| panic!("{} does not run: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{} {args:?} --help failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let root = repo_root();
    String::from_utf8(out.stdout)
        .expect("help is UTF-8")
        .replace(root.to_str().expect("repo path is UTF-8"), "<repo>")
        .trim_end()
        .to_string()
}

/// The names under the help's `Commands:` heading, `help` left out (as the script reads them).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn expected_block(name: &str, bin: &Path) -> String {
    let top = help_text(bin, &[]);
    let mut parts = vec![format!("$ {name} --help\n{top}")];
    let extra = extra_subcommands(name).iter().map(|s| s.to_string());
    for sub in subcommands(&top).into_iter().chain(extra) {
        let text = help_text(bin, &[&sub]);
        parts.push(format!("$ {name} {sub} --help\n{text}"));
    }
    format!("{BEGIN}\n```text\n{}\n```\n{END}", parts.join("\n\n"))
}

fn check(name: &str, bin: &Path) {
    let path = repo_root()
        .join("docs/reference")
        .join(format!("{name}.md"));
    let page = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} is unreadable ({e}); run scripts/reference-docs",
            path.display()
        )
    });
    assert_eq!(
        page.matches(BEGIN).count(),
        1,
        "{}: one {BEGIN} line",
        path.display()
    );
    assert_eq!(
        page.matches(END).count(),
        1,
        "{}: one {END} line",
        path.display()
    );
    let (a, b) = (
        page.find(BEGIN).unwrap(),
        page.find(END).unwrap() + END.len(),
    );
    let intro = page[..a].trim();
    assert!(
        intro.lines().count() >= 3,
        "{}: a title and a paragraph written by hand above the help block",
        path.display()
    );
    let expected = expected_block(name, bin);
    assert!(
        page[a..b] == expected,
        "{} is not {name}'s current --help: rebuild and run scripts/reference-docs\n\
         --- page ---\n{}\n--- current ---\n{expected}",
        path.display(),
        &page[a..b]
    );
}

#[test]
fn echolab_up_page_is_its_help() {
    check("echolab-up", Path::new(env!("CARGO_BIN_EXE_echolab-up")));
}

#[test]
fn echo_server_page_is_its_help() {
    check(
        "echo-server",
        &echolab_testkit::workspace_bin("echo-server"),
    );
}

#[test]
fn echo_bench_page_is_its_help() {
    check("echo-bench", &echolab_testkit::workspace_bin("echo-bench"));
}

#[test]
fn echolab_report_page_is_its_help() {
    check(
        "echolab-report",
        &echolab_testkit::workspace_bin("echolab-report"),
    );
}

#[test]
fn echolab_netem_page_is_its_help() {
    check(
        "echolab-netem",
        &echolab_testkit::workspace_bin("echolab-netem"),
    );
}

#[test]
fn subcommands_are_read_from_the_commands_heading() {
    let help = "Usage: x <COMMAND>\n\nCommands:\n  probe  Says\n         more\n  apply  Does\n  help   Print\n\nOptions:\n  -h  Help\n";
    assert_eq!(subcommands(help), ["probe", "apply"]);
}
