//! Command-line helpers shared by the echolab binaries: every one of them answers bad input
//! with one line naming the problem and exit status 2, never clap's multi-line usage dump.

/// Folds a rendered command-line error into one line: the message and any `tip:` lines, without
/// the `Usage:` block, the `For more information` hint or the leading `error: `.
///
/// `rendered` is clap's `Error::render().to_string()` (plain text, no ANSI styling), e.g.
/// `"error: unexpected argument '--modle' found\n\n  tip: a similar argument exists: '--model'\n\nUsage: echo-server [OPTIONS]\n\nFor more information, try '--help'.\n"`
/// becomes `"unexpected argument '--modle' found tip: a similar argument exists: '--model'"`.
/// Lines are trimmed and blank lines dropped, so an error that lists missing arguments one per
/// line ends up naming all of them on the one line. Never fails; empty input gives `""`.
pub fn one_line_error(rendered: &str) -> String {
    rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .trim_start_matches("error: ")
        .to_string()
}

/// Exit status for bad command-line input (clap's own choice, and the sysexits tradition).
pub const EXIT_USAGE: u8 = 2;

/// Finishes a clap parse for binary `prog`: `--help` and `--version` are printed as clap
/// renders them (exit 0); any other error becomes `prog: <one line>` on stderr (exit 2).
///
/// # Errors
/// The exit status `main` should end with when the program should not run (0 or
/// [`EXIT_USAGE`]).
pub fn parsed_or_exit<T>(prog: &str, parsed: Result<T, clap::Error>) -> Result<T, u8> {
    match parsed {
        Ok(args) => Ok(args),
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            Err(0)
        }
        Err(e) => {
            eprintln!("{prog}: {}", one_line_error(&e.render().to_string()));
            Err(EXIT_USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::one_line_error;

    #[test]
    fn keeps_message_and_tip_drops_usage_and_hint() {
        let rendered = "error: unexpected argument '--modle' found\n\n  tip: a similar argument exists: '--model'\n\nUsage: echo-server [OPTIONS]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line_error(rendered),
            "unexpected argument '--modle' found tip: a similar argument exists: '--model'"
        );
    }

    #[test]
    fn joins_a_list_of_missing_arguments() {
        let rendered = "error: the following required arguments were not provided:\n  <CONNS>\n  <ROUNDS>\n\nUsage: echo-bench <HOST> <PORT> <CONNS> <ROUNDS>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line_error(rendered),
            "the following required arguments were not provided: <CONNS> <ROUNDS>"
        );
    }

    #[test]
    fn text_without_usage_block_is_kept_whole() {
        assert_eq!(
            one_line_error("error: invalid value '10x' for '--duration <DURATION>'\n"),
            "invalid value '10x' for '--duration <DURATION>'"
        );
        assert_eq!(one_line_error(""), "");
    }
}
