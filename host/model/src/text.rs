//! Text Berth shows but did not write: messages from plugins and guests,
//! names and labels from requests. Control characters are shown escaped, so
//! such text cannot move the cursor, clear the screen or fake lines on an
//! operator's terminal, and so are invisible format characters (bidi
//! overrides and isolates, zero-width characters, line and paragraph
//! separators), so it cannot show as other words than it holds ("Trojan
//! Source"); input echoed in a message is cut short.

use std::borrow::Cow;
use std::fmt::Write as _;

/// How much of an input a message echoes.
const ECHO_CHARS: usize = 64;

/// Whether `c` is shown escaped: a control character, or one that is
/// invisible yet changes how the text around it shows (Unicode's format
/// characters, and the line and paragraph separators).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c as u32,
            0xAD | 0x600..=0x605
                | 0x61C
                | 0x6DD
                | 0x70F
                | 0x890..=0x891
                | 0x8E2
                | 0x180E
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0001
                | 0xE0020..=0xE007F
        )
}

/// `s` with every control and format character written as `\u{..}`.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A message of several lines (a config file's parse error with its
/// excerpt) as lines: each escaped like [`printable`], every line after the
/// first indented, so no line of it passes for a message of its own.
pub fn printable_lines(s: &str) -> String {
    s.trim_end_matches('\n')
        .split('\n')
        .map(|l| printable(l.trim_end_matches('\r')))
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// An input as a message echoes it: quoted, escaped, and at most 64
/// characters, with its full length when cut.
pub fn echo(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(ECHO_CHARS).collect();
    if chars.next().is_none() {
        format!("{head:?}")
    } else {
        format!("{head:?}… ({} bytes)", s.len())
    }
}

/// A name as a shell word in a command Berth suggests: as is when plain,
/// else single-quoted; control characters escaped either way.
pub fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", printable(s).replace('\'', "'\\''"))
    }
}

/// An error and its causes on one line, `outer: cause: root`, each cause
/// once: a message that already shows its cause's text (most of Berth's
/// errors do, for logs) is not followed by it again.
pub fn causes_once(chain: impl IntoIterator<Item = String>) -> String {
    let mut out = String::new();
    for text in chain {
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_commands_quote_names() {
        assert_eq!(shell_word("db-1"), "db-1");
        assert_eq!(shell_word("my vol"), "'my vol'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert!(matches!(printable("plain ünïcode"), Cow::Borrowed(_)));
        assert_eq!(printable("a\x1b[2Jb\0c\nd"), "a\\u{1b}[2Jb\\u{0}c\\u{a}d");
        assert_eq!(printable("\u{9b}x"), "\\u{9b}x");
    }

    #[test]
    fn format_characters_that_disguise_text_are_shown_escaped() {
        // A right-to-left override, a line separator, a zero-width space, an isolate.
        assert_eq!(
            printable("ok\u{202e}evil\u{2028}x\u{200b}y\u{2066}z"),
            "ok\\u{202e}evil\\u{2028}x\\u{200b}y\\u{2066}z"
        );
        assert!(matches!(printable("naïve – “quoted” 日本"), Cow::Borrowed(_)));
    }

    #[test]
    fn messages_of_several_lines_print_as_indented_lines() {
        assert_eq!(
            printable_lines("line 1\n  |\n1 | x = \u{1b}\n"),
            "line 1\n    |\n  1 | x = \\u{1b}"
        );
    }

    #[test]
    fn echoes_are_short() {
        assert_eq!(echo("vol"), "\"vol\"");
        let long = "x".repeat(100_000);
        let e = echo(&long);
        assert!(e.len() < 100 && e.ends_with("(100000 bytes)"), "{e}");
        assert_eq!(echo("a\x1bb"), "\"a\\u{1b}b\"");
    }

    #[test]
    fn each_cause_is_said_once() {
        let chain = |v: &[&str]| causes_once(v.iter().map(|s| s.to_string()));
        assert_eq!(
            chain(&[
                "registry r: connection refused (hint)",
                "connection refused (hint)"
            ]),
            "registry r: connection refused (hint)"
        );
        assert_eq!(chain(&["reading x", "no such file"]), "reading x: no such file");
        assert_eq!(chain(&["only"]), "only");
    }
}
