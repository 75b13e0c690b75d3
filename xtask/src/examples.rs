//! The book's examples that are not walks: every `berth` (and
//! `hostpath-plugin`) command in a plain `sh` block, as written, must parse
//! with the real command line. Each is run with `BERTH_CHECK_ARGS` set,
//! which makes the binary stop once
//! its arguments are read (nothing is done), so a flag renamed, a value no
//! longer taken or a subcommand gone fails the check with the page and line.
//! Blocks fenced `sh,walk` are run whole instead (`docs.rs`).
//!
//! Configuration examples are read by the real parsers the same way: a
//! block fenced `toml,berth` is a whole `berth.toml` (`berth serve
//! --check`), `toml,berth-part` a part of one (checked inside a minimal
//! config: a plugin `hostpath` and a node `node-a`), `toml,agent` a whole
//! `agent.toml` and `toml,agent-part` a part of one (`berth agent --check`).
//! A file an example names (a key, a certificate) need not exist.

use std::process::{Command, Stdio};

use anyhow::bail;

/// The commands checked: Berth's own, and the sample plugin's.
const CHECKED: [&str; 2] = ["berth", "hostpath-plugin"];

/// One command of an example: where it is, and its words.
struct Example {
    at: String,
    words: Vec<String>,
}

/// Checks every `berth` command of the pages' plain `sh` blocks with the
/// `berth` found on `path`; how many were checked.
pub fn check(pages: &[std::path::PathBuf], path: &str) -> anyhow::Result<usize> {
    let (mut examples, mut configs) = (Vec::new(), Vec::new());
    for page in pages {
        let name = page
            .strip_prefix(crate::root())
            .unwrap_or(page)
            .display()
            .to_string();
        let text = std::fs::read_to_string(page)?;
        examples.extend(of_page(&name, &text));
        configs.extend(configs_of(&name, &text));
    }
    let mut failed = Vec::new();
    for e in &examples {
        let out = Command::new(&e.words[0])
            .args(&e.words[1..])
            .env("PATH", path)
            .env("BERTH_CHECK_ARGS", "1")
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            failed.push(format!(
                "{}: {}\n    {}",
                e.at,
                e.words.join(" "),
                String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .replace('\n', "\n    ")
            ));
        }
    }
    let dir = std::env::temp_dir().join(format!("berth-examples-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for c in &configs {
        let file = dir.join("example.toml");
        std::fs::write(&file, c.whole())?;
        let out = Command::new("berth")
            .args([c.kind.command(), "--check", "--config"])
            .arg(&file)
            .env("PATH", path)
            .stdin(Stdio::null())
            .output()?;
        // A file the example names (a key, a certificate) is the reader's
        // to make: its absence is not the example's fault.
        let said = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && !said.contains("No such file or directory") {
            failed.push(format!(
                "{} ({}): {}",
                c.at,
                c.kind.fence(),
                said.trim().replace('\n', "\n    ")
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !failed.is_empty() {
        bail!(
            "{} of the book's commands and configurations are refused as written:\n  {}",
            failed.len(),
            failed.join("\n  ")
        );
    }
    Ok(examples.len() + configs.len())
}

/// What a configuration example is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Berth,
    BerthPart,
    Agent,
    AgentPart,
}

const KINDS: [Kind; 4] = [Kind::Berth, Kind::BerthPart, Kind::Agent, Kind::AgentPart];

impl Kind {
    fn fence(self) -> &'static str {
        match self {
            Kind::Berth => "toml,berth",
            Kind::BerthPart => "toml,berth-part",
            Kind::Agent => "toml,agent",
            Kind::AgentPart => "toml,agent-part",
        }
    }

    fn command(self) -> &'static str {
        match self {
            Kind::Berth | Kind::BerthPart => "serve",
            Kind::Agent | Kind::AgentPart => "agent",
        }
    }

    /// What a part is checked inside: its keys before these, its tables after.
    fn base(self) -> (&'static str, &'static str) {
        match self {
            Kind::Berth | Kind::Agent => ("", ""),
            Kind::BerthPart => (
                "state = \"state/berth.redb\"\n",
                "[[plugin]]\nname = \"hostpath\"\ncontroller = \"csi.sock\"\n\n\
                 [[node]]\nname = \"node-a\"\ndir = \"node-a\"\nplugins = { hostpath = \"csi.sock\" }\n",
            ),
            Kind::AgentPart => (
                "node = \"node-a\"\nserver = \"https://berth.example:7443\"\ndir = \"agent\"\n",
                "[plugins]\nhostpath = \"unix:///run/csi/node.sock\"\n",
            ),
        }
    }
}

/// One configuration example: where it is, what it is, its text.
struct Config {
    at: String,
    kind: Kind,
    text: String,
}

impl Config {
    /// The file checked: a part's keys first (before any table), the base's
    /// keys, the part's tables, the base's tables.
    fn whole(&self) -> String {
        let (keys, tables) = self.kind.base();
        let split = self
            .text
            .lines()
            .position(|l| l.trim_start().starts_with('['))
            .unwrap_or(self.text.lines().count());
        let lines: Vec<&str> = self.text.lines().collect();
        format!(
            "{}\n{keys}\n{}\n{tables}",
            lines[..split].join("\n"),
            lines[split..].join("\n")
        )
    }
}

/// A page's configuration examples, by their fences.
fn configs_of(name: &str, text: &str) -> Vec<Config> {
    let mut out: Vec<Config> = Vec::new();
    let mut current: Option<Config> = None;
    for (i, line) in text.lines().enumerate() {
        match current.as_mut() {
            None => {
                current = KINDS
                    .into_iter()
                    .find(|k| line.trim() == format!("```{}", k.fence()))
                    .map(|kind| Config {
                        at: format!("{name}:{}", i + 1),
                        kind,
                        text: String::new(),
                    });
            }
            Some(_) if line.trim() == "```" => out.extend(current.take()),
            Some(c) => {
                c.text.push_str(line);
                c.text.push('\n');
            }
        }
    }
    out
}

/// The `berth` commands of a page's plain `sh` blocks.
fn of_page(name: &str, text: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut inside = false;
    let mut pending = String::new();
    let mut first = 0;
    for (i, line) in text.lines().enumerate() {
        if !inside {
            inside = line.trim() == "```sh";
            continue;
        }
        if line.trim() == "```" {
            inside = false;
            continue;
        }
        if pending.is_empty() {
            first = i + 1;
        }
        match line.trim_end().strip_suffix('\\') {
            Some(more) => {
                pending.push_str(more);
                pending.push(' ');
                continue;
            }
            None => pending.push_str(line),
        }
        for command in commands(&words(&std::mem::take(&mut pending))) {
            if command.first().is_some_and(|w| CHECKED.contains(&w.as_str())) {
                out.push(Example {
                    at: format!("{name}:{first}"),
                    words: command,
                });
            }
        }
    }
    out
}

/// A command line's words as the shell splits them: quotes and backslashes
/// honoured, a `#` starting a word starts a comment.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '#' if word.is_none() => break,
            c if c.is_whitespace() => out.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                w.extend(chars.by_ref().take_while(|c| *c != '\''));
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

/// The commands of a line's words: split at `;`, `&&`, `||` and `|`,
/// leading variable assignments (`NAME=value`) dropped.
fn commands(words: &[String]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    for w in words {
        let (word, ends) = match w.strip_suffix(';') {
            Some(w) => (w.to_string(), true),
            None => (w.clone(), false),
        };
        if ["&&", "||", "|", ";"].contains(&word.as_str()) {
            out.push(Vec::new());
            continue;
        }
        let current = out.last_mut().expect("one command at least");
        let assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if !(current.is_empty() && assignment) {
            current.push(word);
        }
        if ends {
            out.push(Vec::new());
        }
    }
    out.retain(|c| !c.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_checked_with_its_keys_before_any_table() {
        let page = "```toml,berth-part\nnamespace_secrets = { a = [\"x\"] }\n[console]\naddress = \"127.0.0.1:1\"\n```\n";
        let found = configs_of("p.md", page);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].at, "p.md:1");
        let whole = found[0].whole();
        let at = |text: &str| whole.find(text).unwrap();
        assert!(at("namespace_secrets") < at("state =") && at("state =") < at("[console]"));
        assert!(at("[console]") < at("[[plugin]]"), "{whole}");
    }

    #[test]
    fn a_blocks_berth_commands_are_found_as_the_shell_splits_them() {
        let page = "text\n```sh\nberth volume list; berth snapshot get 'a b'   # a comment\n\
                    BERTH_TOKEN=x berth acl token self && cd x\nberth volume create v \\\n  --size 1GiB\n```\n\
                    ```sh,walk\nberth status\n```\n";
        let found: Vec<(String, String)> = of_page("p.md", page)
            .into_iter()
            .map(|e| (e.at, e.words.join(" ")))
            .collect();
        assert_eq!(
            found,
            [
                ("p.md:3".to_string(), "berth volume list".to_string()),
                ("p.md:3".into(), "berth snapshot get a b".into()),
                ("p.md:4".into(), "berth acl token self".into()),
                ("p.md:5".into(), "berth volume create v --size 1GiB".into()),
            ]
        );
    }
}
