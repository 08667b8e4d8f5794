//! How numbers and tables are written in report.md: one spelling for every figure, so a reader
//! (and a test) finds the same number in the same form everywhere.

use crate::inference::{Interval, Method, Ratio, Summary, NOISY_CV};

/// A number to about three significant figures: `53528`, `874`, `12.3`, `1.47`, `0.00123`.
/// Values of 100 and above are whole numbers (QPS, µs), as the seeds print them.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        let decimals = (2 - a.log10().floor() as i32).clamp(3, 9) as usize;
        format!("{v:.decimals$}")
    }
}

/// A ratio, `2.15×`; below 1 with three significant figures (`0.463×`, `0.0346×`), so that
/// 0.1036 and 0.100 read apart and a small ratio never prints as `0.00×`.
pub fn times(v: f64) -> String {
    format!("{}×", ratio_num(v))
}

/// The number of [`times`] without the sign.
fn ratio_num(v: f64) -> String {
    if v != 0.0 && v.abs() < 1.0 && v.is_finite() {
        let decimals = (2 - v.abs().log10().floor() as i32).clamp(3, 9) as usize;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.2}")
    }
}

/// A relative change in percent with its sign, `-89.6%`.
pub fn signed_pct(fraction: f64) -> String {
    format!("{:+.1}%", fraction * 100.0)
}

/// A fraction as a percentage, `12.5%`.
pub fn pct(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// `lo–hi` with [`num`].
pub fn interval(i: Interval) -> String {
    format!("{}–{}", num(i.low), num(i.high))
}

/// A ratio's interval, `1.90–2.43×`.
pub fn ratio_interval(ci: Interval) -> String {
    format!("{}–{}", ratio_num(ci.low), times(ci.high))
}

/// A ratio with its interval: `2.15× (95% CI 1.90–2.43×)`, `0.100× (exact)`, or
/// `2.15× (no CI: <why>)`.
pub fn ratio(r: &Ratio) -> String {
    match (r.ci95, r.method) {
        (Some(_), Method::Exact) => format!("{} (exact)", times(r.value)),
        (Some(ci), _) => format!("{} (95% CI {})", times(r.value), ratio_interval(ci)),
        (None, _) => format!(
            "{} (no CI: {})",
            times(r.value),
            r.no_ci.as_deref().unwrap_or("no interval")
        ),
    }
}

/// The noisy flag for a summary: ` ⚠ noisy (CV 14.2%)`, or empty.
pub fn noisy_flag(s: &Summary) -> String {
    match s.cv() {
        Some(cv) if cv > NOISY_CV => format!(" ⚠ noisy (CV {})", pct(cv)),
        _ => String::new(),
    }
}

/// One figure over repetitions: `median [min–max] (95% CI lo–hi)`, flagged when noisy;
/// a single repetition is `value (1 rep, no CI)`, identical repetitions
/// `value (exact, all 3 reps)`.
pub fn figure(s: &Summary) -> String {
    if s.n == 1 {
        return format!("{} (1 rep, no CI)", num(s.median));
    }
    if s.is_exact() {
        return format!("{} (exact, all {} reps)", num(s.median), s.n);
    }
    let ci = s
        .ci95
        .map(|ci| {
            let how = if s.method == Method::Bootstrap {
                ", bootstrap"
            } else {
                ""
            };
            format!(" (95% CI {}{how})", interval(ci))
        })
        .unwrap_or_default();
    format!(
        "{} [{}–{}]{ci}{}",
        num(s.median),
        num(s.min),
        num(s.max),
        noisy_flag(s)
    )
}

/// A figure, or the reason there is none (`"missing"`, `"failed: …"`).
pub fn figure_or(s: Option<Summary>, absence: impl FnOnce() -> String) -> String {
    s.as_ref().map(figure).unwrap_or_else(absence)
}

/// A Markdown table.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing trailing cells are left empty.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// GitHub-flavoured Markdown, `|` and newlines in cells escaped.
    pub fn to_markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        let line = |cells: &[String]| {
            let mut out = String::from("|");
            for i in 0..self.header.len() {
                out.push(' ');
                out.push_str(&esc(cells.get(i).map(String::as_str).unwrap_or("")));
                out.push_str(" |");
            }
            out.push('\n');
            out
        };
        let mut out = line(&self.header);
        out.push('|');
        out.push_str(&"---|".repeat(self.header.len()));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_three_significant_figures() {
        assert_eq!(num(53527.67), "53528");
        assert_eq!(num(874.4), "874");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(1.469822), "1.47");
        assert_eq!(num(0.233087), "0.233");
        assert_eq!(num(0.0012345), "0.00123");
        assert_eq!(num(0.0), "0");
        assert_eq!(signed_pct(-0.896), "-89.6%");
        assert_eq!(times(2.1484), "2.15×");
        assert_eq!(times(0.034602), "0.0346×");
        assert_eq!(
            (times(0.1036), times(0.1)),
            ("0.104×".into(), "0.100×".into())
        );
        assert_eq!(times(0.0), "0.00×");
    }

    #[test]
    fn figures_show_median_range_interval_and_noise() {
        let s = Summary::of(&[100.0, 120.0, 80.0]).unwrap();
        let f = figure(&s);
        assert!(f.starts_with("100 [80.0–120]"), "{f}");
        assert!(
            f.contains("95% CI") && f.contains("⚠ noisy (CV 20.0%)"),
            "{f}"
        );
        assert_eq!(figure(&Summary::of(&[5.0]).unwrap()), "5.00 (1 rep, no CI)");
        assert_eq!(
            figure(&Summary::of(&[104.0, 104.0]).unwrap()),
            "104 (exact, all 2 reps)"
        );
    }

    #[test]
    fn tables_escape_pipes() {
        let mut t = Table::new(["a", "b"]);
        t.row(["x|y"]);
        assert_eq!(t.to_markdown(), "| a | b |\n|---|---|\n| x\\|y |  |\n");
    }
}
