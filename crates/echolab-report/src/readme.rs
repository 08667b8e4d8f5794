//! The README's results excerpt, cut from a real report and spliced between two marker
//! comments, so that it is never edited by hand (`scripts/readme-results` drives it through
//! `echolab-report --readme README.md RESULTS_DIR`).

use echolab_core::results::Manifest;

/// The line that opens the generated part of the README.
pub const BEGIN: &str = "<!-- results-excerpt:begin: written by scripts/readme-results from a real run; do not edit by hand -->";
/// The line that closes it.
pub const END: &str = "<!-- results-excerpt:end -->";

/// Sections of the report the excerpt shows, by the start of their heading.
pub const SECTIONS: [&str; 2] = ["Verdicts", "QPS matrix"];

/// The sections of `report_md` whose `## ` heading starts with one of `headings`, in report
/// order, each with its heading demoted to `####` and everything under it (table, notes, the
/// seed's figures and verdicts) up to the next `## ` heading.
pub fn sections(report_md: &str, headings: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for part in report_md.split("\n## ").skip(1) {
        if headings.iter().any(|h| part.starts_with(h)) {
            out.push(format!("#### {}", part.trim_end()));
        }
    }
    out
}

/// The excerpt: where it comes from (run id, profile, machine, repetitions, git revision),
/// then the [`SECTIONS`] of the report.
pub fn excerpt(report_md: &str, manifest: &Manifest) -> String {
    let env = &manifest.environment;
    let profile = &manifest.profile.profile.name;
    let e = &manifest.experiment;
    let reps = if e.is_adaptive() {
        format!(
            "{}–{} repetitions (adaptive)",
            e.repetitions,
            e.max_repetitions()
        )
    } else {
        format!("{} repetitions", e.repetitions)
    };
    format!(
        "An excerpt of a real report, run `{}` (`echolab-up {}`, profile {profile}, {} logical CPUs, {}, kernel {}, \
         {reps}, git {}), cut from its report.md by `scripts/readme-results`:\n\n{}\n",
        manifest.run_id,
        manifest.args.join(" "),
        env.cpus,
        env.cpu_model,
        env.kernel,
        env.git_rev,
        sections(report_md, &SECTIONS).join("\n\n")
    )
}

/// `readme` with the text between [`BEGIN`] and [`END`] replaced by `excerpt`.
///
/// # Errors
/// A sentence when the markers are missing, repeated or out of order.
pub fn splice(readme: &str, excerpt: &str) -> Result<String, String> {
    let count = |m: &str| readme.matches(m).count();
    if count(BEGIN) != 1 || count(END) != 1 {
        return Err(format!(
            "the README needs exactly one {BEGIN} line and one {END} line (found {} and {})",
            count(BEGIN),
            count(END)
        ));
    }
    let start = readme.find(BEGIN).expect("counted") + BEGIN.len();
    let end = readme.find(END).expect("counted");
    if end < start {
        return Err(format!("{END} comes before {BEGIN} in the README"));
    }
    Ok(format!(
        "{}\n\n{}\n\n{}",
        &readme[..start],
        excerpt.trim(),
        &readme[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_the_marked_part_and_rejects_bad_markers() {
        let readme = format!("# x\n\nbefore\n\n{BEGIN}\nold text\n{END}\n\nafter\n");
        let out = splice(&readme, "new\ntext\n").unwrap();
        assert_eq!(
            out,
            format!("# x\n\nbefore\n\n{BEGIN}\n\nnew\ntext\n\n{END}\n\nafter\n")
        );
        // Idempotent: splicing the same excerpt again changes nothing.
        assert_eq!(splice(&out, "new\ntext\n").unwrap(), out);
        assert!(splice("# no markers\n", "x")
            .unwrap_err()
            .contains("exactly one"));
        let reversed = format!("{END}\n{BEGIN}\n");
        assert!(splice(&reversed, "x").unwrap_err().contains("comes before"));
    }

    #[test]
    fn sections_are_cut_at_the_next_heading() {
        let md = "# title\n\n## Verdicts\n\ntable v\n\n## QPS matrix, a\n\ntable a\n\n- claim\n\n## Other\n\nno\n\n## Latency ratios, a\n\ntable b\n";
        assert_eq!(
            sections(md, &SECTIONS),
            vec![
                "#### Verdicts\n\ntable v",
                "#### QPS matrix, a\n\ntable a\n\n- claim"
            ]
        );
    }
}
