//! `berth.toml(5)` and `agent.toml(5)`, made from the book's configuration
//! reference (`docs/src/reference/config.md`), whose keys a test checks
//! against the parsers: one source for the book and the man pages.
//!
//! The page's own shapes only are read: headings, paragraphs, fenced code,
//! bullet lists and the `| key | type | default | what |` tables, each row
//! of which becomes a tagged paragraph.

use std::path::Path;

use anyhow::Context;

/// The reference page, relative to the checkout.
pub const SOURCE: &str = "docs/src/reference/config.md";

/// Writes `berth.toml.5` and `agent.toml.5` of Berth `version` into `dir`;
/// their paths.
pub fn write(root: &Path, dir: &Path, version: &str) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let text = std::fs::read_to_string(root.join(SOURCE)).with_context(|| format!("reading {SOURCE}"))?;
    let mut written = Vec::new();
    for (file, page) in pages(&text, version)? {
        let path = dir.join(file);
        std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// (file name, roff) of both pages.
fn pages(text: &str, version: &str) -> anyhow::Result<[(&'static str, String); 2]> {
    let server = text
        .find("\n## berth.toml")
        .context("no `## berth.toml` section")?;
    let agent = text
        .find("\n## agent.toml")
        .context("no `## agent.toml` section")?;
    let intro = text[..server].split_once('\n').map_or("", |(_, rest)| rest);
    let server_part = &text[server..agent];
    let agent_part = &text[agent..];
    let strip_heading = |part: &str| {
        part.trim_start()
            .split_once('\n')
            .map_or("", |(_, rest)| rest)
            .to_string()
    };
    Ok([
        (
            "berth.toml.5",
            page(
                version,
                "berth.toml",
                "the configuration of berth serve",
                "berth-serve(1), agent.toml(5)",
                &format!("{intro}\n{}", strip_heading(server_part)),
            ),
        ),
        (
            "agent.toml.5",
            page(
                version,
                "agent.toml",
                "the configuration of berth agent and berth-agent",
                "berth-agent(1), berth.toml(5)",
                &format!("{intro}\n{}", strip_heading(agent_part)),
            ),
        ),
    ])
}

fn page(version: &str, name: &str, summary: &str, see_also: &str, body: &str) -> String {
    let mut out = format!(
        ".TH {} 5 \"\" \"berth {}\" \"File formats\"\n.SH NAME\n{} \\- {summary}\n.SH DESCRIPTION\n",
        name.to_uppercase(),
        version,
        escape(name)
    );
    out.push_str(&roff(body));
    out.push_str(&format!(
        ".SH SEE ALSO\n{}\n.PP\nThe book's configuration reference holds the same text.\n",
        escape(see_also)
    ));
    out
}

/// Markdown of the reference page's shapes, as roff.
fn roff(markdown: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    let mut paragraph = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            out.push_str(if code { ".fi\n.RE\n" } else { ".PP\n.RS\n.nf\n" });
            code = !code;
            paragraph = false;
            continue;
        }
        if code {
            out.push_str(&format!("{}\n", fix_start(escape(line))));
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            paragraph = false;
        } else if let Some(h) = trimmed
            .strip_prefix("### ")
            .or_else(|| trimmed.strip_prefix("## "))
        {
            out.push_str(&format!(".SS \"{}\"\n", inline(h).replace('"', "")));
            paragraph = false;
        } else if trimmed.starts_with('|') {
            if let Some(row) = table_row(trimmed) {
                out.push_str(&row);
            }
            paragraph = false;
        } else if let Some(item) = trimmed.strip_prefix("- ") {
            out.push_str(&format!(".IP \\(bu 2\n{}\n", inline(item)));
            paragraph = true;
        } else {
            if !paragraph {
                out.push_str(".PP\n");
                paragraph = true;
            }
            out.push_str(&format!("{}\n", inline(trimmed)));
        }
    }
    out
}

/// A key's row as a tagged paragraph; `None` for the header and the rule.
fn table_row(line: &str) -> Option<String> {
    let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
    let [key, kind, default, what] = cells[..] else {
        return Some(format!(".PP\n{}\n", inline(line)));
    };
    if key == "key" || key.starts_with("---") {
        return None;
    }
    Some(format!(
        ".TP\n{} ({}; default {})\n{}\n",
        inline(key),
        inline(kind),
        inline(default),
        inline(what)
    ))
}

/// Inline markdown: code in bold, links as their text, the rest escaped.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(['`', '[']) {
        out.push_str(&escape(&rest[..at]));
        let tail = &rest[at..];
        if let Some(code) = tail.strip_prefix('`') {
            let Some(end) = code.find('`') else {
                out.push_str(&escape(tail));
                return fix_start(out);
            };
            out.push_str(&format!("\\fB{}\\fR", escape(&code[..end])));
            rest = &code[end + 1..];
        } else {
            // [text](target): the text alone.
            match (tail.find("]("), tail.find(')')) {
                (Some(close), Some(end)) if close < end => {
                    out.push_str(&inline(&tail[1..close]));
                    rest = &tail[end + 1..];
                }
                _ => {
                    out.push('[');
                    rest = &tail[1..];
                }
            }
        }
    }
    out.push_str(&escape(rest));
    fix_start(out)
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

/// A line that starts with `.` or `'` would be read as a request.
fn fix_start(line: String) -> String {
    if line.starts_with(['.', '\'']) {
        format!("\\&{line}")
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_the_reference_is_in_a_page() {
        let text = std::fs::read_to_string(crate::root().join(SOURCE)).unwrap();
        let [(_, server), (_, agent)] = pages(&text, "0.0.0").unwrap();
        for page in [&server, &agent] {
            assert!(page.starts_with(".TH "), "{page}");
            // Outside the examples (TOML, as written), no markdown is left.
            let mut example = false;
            for line in page.lines() {
                example = match line {
                    ".nf" => true,
                    ".fi" => false,
                    _ => example,
                };
                assert!(
                    example || !(line.contains("](") || line.contains('`')),
                    "markdown left: {line}"
                );
            }
        }
        let keys = |part: &str| -> Vec<String> {
            part.lines()
                .filter_map(|l| l.strip_prefix("| `"))
                .filter_map(|l| l.split('`').next())
                .map(|k| format!("\\fB{}\\fR (", escape(k)))
                .collect()
        };
        let agent_at = text.find("\n## agent.toml").unwrap();
        for key in keys(&text[..agent_at]) {
            assert!(server.contains(&key), "berth.toml(5) lacks {key}");
        }
        for key in keys(&text[agent_at..]) {
            assert!(agent.contains(&key), "agent.toml(5) lacks {key}");
        }
    }

    #[test]
    fn markdown_shapes_become_roff() {
        let out = roff(
            "### `[oci]`: registries\n\nA [link](x.md) and `code`.\n\n| key | type | default | what |\n| --- | --- | --- | --- |\n| `plain_http` | bool | false | no TLS |\n\n```toml\n.dot = 1\n```\n",
        );
        assert!(out.contains(".SS \"\\fB[oci]\\fR: registries\""), "{out}");
        assert!(out.contains("A link and \\fBcode\\fR."), "{out}");
        assert!(
            out.contains(".TP\n\\fBplain_http\\fR (bool; default false)\nno TLS\n"),
            "{out}"
        );
        assert!(out.contains(".nf\n\\&.dot = 1\n.fi"), "{out}");
    }
}
