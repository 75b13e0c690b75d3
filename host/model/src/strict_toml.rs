//! Config text parsed strictly, every unknown key reported: serde stops at
//! the first key a type does not have, so each one found is blanked out of a
//! copy of the text and the parse tried again, and all of them are reported
//! in the order they stand in the file (then any other error).

use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};

use crate::settings::ConfigError;

/// The most unknown keys looked for in one file.
const MOST: usize = 64;

/// `text` as `T`, or every unknown key of it, in order, with its line.
pub fn from_toml<T: DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    let first = match toml::from_str::<T>(text) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    let mut unknown: Vec<(usize, String)> = Vec::new();
    let mut copy = text.to_string();
    let mut error = Some(first);
    while let Some(e) = error.take() {
        let span = e.span().filter(|_| e.message().starts_with("unknown field"));
        let (Some(span), true) = (span, unknown.len() < MOST) else {
            error = Some(e);
            break;
        };
        let Some(end) = value_end(&copy, &span) else {
            error = Some(e);
            break;
        };
        unknown.push((span.start, e.to_string().trim_end().to_string()));
        blank(&mut copy, span.start..end);
        error = toml::from_str::<T>(&copy).err();
    }
    unknown.sort_by_key(|(at, _)| *at);
    let mut said: Vec<String> = unknown.into_iter().map(|(_, e)| e).collect();
    if let Some(e) = error {
        said.push(e.to_string().trim_end().to_string());
    }
    Err(ConfigError::Syntax(said.join("\n")))
}

/// Where the value of the key at `key` ends, from the text's own tables.
fn value_end(text: &str, key: &Range<usize>) -> Option<usize> {
    let root = DeTable::parse(text).ok()?;
    find_in_table(root.get_ref(), key)
}

fn find_in_table(table: &DeTable<'_>, key: &Range<usize>) -> Option<usize> {
    table.iter().find_map(|(k, v)| {
        if k.span() == *key {
            Some(v.span().end)
        } else {
            find_in_value(v.get_ref(), key)
        }
    })
}

fn find_in_value(value: &DeValue<'_>, key: &Range<usize>) -> Option<usize> {
    match value {
        DeValue::Table(t) => find_in_table(t, key),
        DeValue::Array(a) => a.iter().find_map(|v| find_in_value(v.get_ref(), key)),
        _ => None,
    }
}

/// Spaces over `range` of `text`, its line breaks kept (lines stay where
/// they were, so every error still names its own line).
fn blank(text: &mut String, range: Range<usize>) {
    let blanked: String = text[range.clone()]
        .chars()
        .map(|c| if c == '\n' { '\n' } else { ' ' })
        .collect();
    text.replace_range(range, &blanked);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        name: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        state: Option<String>,
        #[serde(default)]
        plugin: Vec<Inner>,
    }

    #[test]
    fn every_unknown_key_is_reported_in_the_order_it_stands() {
        let text =
            "zeta = 1\nstate = \"s\"\nalpha = [1,\n  2]\n\n[[plugin]]\nname = \"p\"\ncolour = \"blue\"\n";
        let err = from_toml::<Outer>(text).unwrap_err().to_string();
        let at = |key: &str| {
            err.find(&format!("unknown field `{key}`"))
                .unwrap_or_else(|| panic!("{key}: {err}"))
        };
        assert!(at("zeta") < at("alpha") && at("alpha") < at("colour"), "{err}");
        assert!(
            err.contains("line 1") && err.contains("line 3") && err.contains("line 8"),
            "{err}"
        );
        // What else is wrong is said after them.
        let err = from_toml::<Outer>("bogus = 1\nstate = 7\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.find("bogus").unwrap() < err.find("invalid type").unwrap(),
            "{err}"
        );
        // A file without fault parses as before.
        assert_eq!(
            from_toml::<Outer>("state = \"s\"\n").unwrap().state.as_deref(),
            Some("s")
        );
    }
}
