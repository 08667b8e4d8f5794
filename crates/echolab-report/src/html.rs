//! `report.html`: report.md as one self-contained page, tables and plots (the SVG documents
//! inlined) in one file that opens anywhere without the `plots/` directory.
//!
//! It converts only the Markdown this crate writes: `#` to `####` headings, pipe
//! tables, `- ` lists, `---` rules, plot images `![title](plots/file.svg)`, paragraphs, and
//! `**bold**` and `` `code` `` inside them.

use crate::plots::{Plot, PLOTS_DIR};

/// File name of the page inside a results directory.
pub const HTML_FILE: &str = "report.html";

/// `&`, `<`, `>` and `"` escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Inline Markdown of one line: `**bold**` and `` `code` ``, the rest escaped.
fn inline(s: &str) -> String {
    let mut out = String::new();
    let mut bold = false;
    let mut code = false;
    let mut rest = s;
    while !rest.is_empty() {
        if !code && rest.starts_with("**") {
            out.push_str(if bold { "</strong>" } else { "<strong>" });
            bold = !bold;
            rest = &rest[2..];
        } else if rest.starts_with('`') {
            out.push_str(if code { "</code>" } else { "<code>" });
            code = !code;
            rest = &rest[1..];
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push_str(&escape(&c.to_string()));
            rest = &rest[c.len_utf8()..];
        }
    }
    if code {
        out.push_str("</code>");
    }
    if bold {
        out.push_str("</strong>");
    }
    out
}

/// The cells of a table row, `\|` unescaped.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cur.push('|');
                chars.next();
            }
            '|' => out.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    out
}

/// The page: `markdown` converted, each plot image replaced by its SVG document.
pub fn render(title: &str, markdown: &str, plots: &[Plot]) -> String {
    let mut body = String::new();
    let mut para: Vec<String> = Vec::new();
    let mut list: Vec<String> = Vec::new();
    let mut table: Vec<Vec<String>> = Vec::new();
    let flush = |body: &mut String,
                 para: &mut Vec<String>,
                 list: &mut Vec<String>,
                 table: &mut Vec<Vec<String>>| {
        if !para.is_empty() {
            body.push_str(&format!("<p>{}</p>\n", para.join(" ")));
            para.clear();
        }
        if !list.is_empty() {
            body.push_str("<ul>\n");
            for item in list.drain(..) {
                body.push_str(&format!("<li>{item}</li>\n"));
            }
            body.push_str("</ul>\n");
        }
        if !table.is_empty() {
            body.push_str("<table>\n");
            for (i, row) in table.drain(..).enumerate() {
                let tag = if i == 0 { "th" } else { "td" };
                body.push_str("<tr>");
                for c in row {
                    body.push_str(&format!("<{tag}>{}</{tag}>", inline(&c)));
                }
                body.push_str("</tr>\n");
            }
            body.push_str("</table>\n");
        }
    };
    for line in markdown.lines() {
        let t = line.trim_end();
        if t.starts_with('|') {
            if !para.is_empty() || !list.is_empty() {
                flush(&mut body, &mut para, &mut list, &mut Vec::new());
            }
            let row = cells(t);
            // The separator row under the header.
            if !row
                .iter()
                .all(|c| !c.is_empty() && c.chars().all(|ch| ch == '-'))
            {
                table.push(row);
            }
            continue;
        }
        let is_item = t.starts_with("- ");
        let is_block = t.is_empty() || t.starts_with('#') || t == "---" || t.starts_with("![");
        // A list continues across items and a paragraph across plain lines; anything else
        // ends the block before it.
        match (is_item, is_block) {
            (true, _) => flush(&mut body, &mut para, &mut Vec::new(), &mut table),
            (false, false) => flush(&mut body, &mut Vec::new(), &mut list, &mut table),
            (false, true) => flush(&mut body, &mut para, &mut list, &mut table),
        }
        if t.is_empty() {
            continue;
        }
        if let Some((level, text)) = [("####", 4), ("###", 3), ("##", 2), ("#", 1)]
            .iter()
            .find_map(|(p, l)| t.strip_prefix(&format!("{p} ")).map(|x| (*l, x)))
        {
            body.push_str(&format!("<h{level}>{}</h{level}>\n", inline(text)));
        } else if t == "---" {
            body.push_str("<hr>\n");
        } else if let Some(item) = t.strip_prefix("- ") {
            list.push(inline(item));
        } else if let Some(svg) = t
            .strip_prefix("![")
            .and_then(|r| r.split_once("](").map(|(_, f)| f.trim_end_matches(')')))
            .and_then(|f| f.strip_prefix(&format!("{PLOTS_DIR}/")))
            .and_then(|f| plots.iter().find(|p| p.file == f))
        {
            body.push_str(&format!(
                "<figure>{}<figcaption>{}</figcaption></figure>\n",
                svg.svg,
                escape(&svg.title)
            ));
        } else {
            para.push(inline(t));
        }
    }
    flush(&mut body, &mut para, &mut list, &mut table);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n\
         body {{ font-family: system-ui, \"Noto Sans\", \"DejaVu Sans\", \"Noto Sans CJK SC\", \"Source Han Sans SC\", \
         \"WenQuanYi Micro Hei\", \"PingFang SC\", \"Microsoft YaHei\", sans-serif; max-width: 1200px; margin: 2em auto; line-height: 1.4; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}\n\
         th, td {{ border: 1px solid #bbb; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }}\n\
         th {{ background: #eee; }}\nfigure {{ margin: 1em 0; }}\nfigure svg {{ max-width: 100%; height: auto; }}\n\
         </style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_subset_converts() {
        let md = "# t\n\n### Setting\n\nA **b** `c` <x>\n\n| a | b\\|c |\n|---|---|\n| 1 | 2 |\n\n- one\n- two\n\n![P](plots/p.svg)\n\n---\n";
        let plot = Plot {
            file: "p.svg".into(),
            title: "P".into(),
            svg: "<svg>drawn</svg>".into(),
            caption: "What P draws.".into(),
        };
        let html = render("T", md, &[plot]);
        assert!(html.contains("<h1>t</h1>"), "{html}");
        assert!(html.contains("<h3>Setting</h3>"), "{html}");
        assert!(
            html.contains("<p>A <strong>b</strong> <code>c</code> &lt;x&gt;</p>"),
            "{html}"
        );
        assert!(
            html.contains("<tr><th>a</th><th>b|c</th></tr>\n<tr><td>1</td><td>2</td></tr>"),
            "{html}"
        );
        assert!(
            html.contains("<ul>\n<li>one</li>\n<li>two</li>\n</ul>"),
            "{html}"
        );
        assert!(
            html.contains("<figure><svg>drawn</svg><figcaption>P</figcaption></figure>"),
            "{html}"
        );
        assert!(html.contains("<hr>") && !html.contains("---"), "{html}");
    }
}
