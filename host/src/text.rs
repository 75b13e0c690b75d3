//! Text Berth shows but did not write: messages from plugins and guests,
//! names and labels from requests. Control characters are shown escaped, so
//! such text cannot move the cursor, clear the screen or fake lines on an
//! operator's terminal; input echoed in a message is cut short.

use std::borrow::Cow;
use std::fmt::Write as _;

/// How much of an input a message echoes.
const ECHO_CHARS: usize = 64;

/// `s` with every control character written as `\u{..}`.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
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
    fn echoes_are_short() {
        assert_eq!(echo("vol"), "\"vol\"");
        let long = "x".repeat(100_000);
        let e = echo(&long);
        assert!(e.len() < 100 && e.ends_with("(100000 bytes)"), "{e}");
        assert_eq!(echo("a\x1bb"), "\"a\\u{1b}b\"");
    }
}
