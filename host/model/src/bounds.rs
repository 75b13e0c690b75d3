//! What Berth takes from outside about a node, bounded: ids and names that
//! become path components, labels, and how much a node may claim (plugins,
//! topology, sizes). Checked where the claim arrives (an agent's config, a
//! plugin directory, the server's side of a session), so nothing past the
//! edge holds an unbounded or path-breaking value.

use std::collections::BTreeMap;
use std::fmt;

/// A node may run at most this many node plugins.
pub const NODE_PLUGINS_MAX: usize = 64;
/// Labels per node, and the bytes of a label's key and value.
pub const LABELS_MAX: usize = 64;
pub const LABEL_KEY_MAX: usize = 128;
pub const LABEL_VALUE_MAX: usize = 256;
/// An operator's name: bytes.
pub const NAME_MAX: usize = 63;
/// The longest name a new volume may have (Kubernetes' longest object name).
pub const VOLUME_NAME_MAX: usize = 253;
/// A plain name (a path component): bytes.
pub const PLAIN_MAX: usize = 128;
/// A node plugin's fingerprint as an agent reports it.
pub const DRIVER_MAX: usize = 63;
pub const VENDOR_VERSION_MAX: usize = 128;
pub const NODE_ID_MAX: usize = 256;
pub const TOPOLOGY_SEGMENTS_MAX: usize = 64;
pub const CAPABILITIES_MAX: usize = 64;
/// A directory an agent names (its staging and publish directories).
pub const DIR_MAX: usize = 1024;
/// A backend volume id as an agent holds it.
pub const VOLUME_ID_MAX: usize = 1024;

/// A claim out of bounds: what it is about and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {why}")]
pub struct OutOfBounds {
    pub what: String,
    pub why: String,
}

pub(crate) fn out(what: impl fmt::Display, why: impl Into<String>) -> OutOfBounds {
    OutOfBounds {
        what: what.to_string(),
        why: why.into(),
    }
}

/// At most 64 characters of outside text, for a message.
fn shown(text: &str) -> String {
    text.chars().take(64).collect()
}

/// Whether `name` can be one path component below a directory Berth owns:
/// 1 to 128 ASCII letters, digits, '-', '_' or '.', not starting with '.'
/// (so never `.` or `..`), never a '/'.
pub fn plain(what: &str, name: &str) -> Result<(), OutOfBounds> {
    let ok = !name.is_empty()
        && name.len() <= PLAIN_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(out(
            format!("{what} {:?}", shown(name)),
            format!("must be 1 to {PLAIN_MAX} letters, digits, '-', '_' or '.', not starting with '.'"),
        ))
    }
}

/// An operator's name (a node, a plugin, a policy module): 1 to 63 ASCII
/// letters, digits, '-', '_' or '.', not starting with '.'.
pub fn name(name: &str) -> Result<(), OutOfBounds> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(out(
            format!("{:?}", shown(name)),
            format!("must be 1 to {NAME_MAX} letters, digits, '-', '_' or '.', not starting with '.'"),
        ))
    }
}

/// A new volume's name, by Docker's rule for volume names: 1 to 253 ASCII
/// letters, digits, '_', '.' or '-', starting with a letter or a digit. So
/// every volume can be used from Docker (`docker run -v NAME:/data`) and
/// named in a path or a shell without quoting. Volumes made before the rule
/// keep their names.
pub fn volume_name(name: &str) -> Result<(), OutOfBounds> {
    let ok = name.len() <= VOLUME_NAME_MAX
        && name.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(out(
            format!("name {:?}", shown(name)),
            format!(
                "must be 1 to {VOLUME_NAME_MAX} letters, digits, '_', '.' or '-', starting with a letter or a digit (Docker's rule for volume names)"
            ),
        ))
    }
}

/// Text of at most `max` bytes with no control characters.
pub fn text(what: impl fmt::Display, value: &str, max: usize) -> Result<(), OutOfBounds> {
    if value.len() > max {
        return Err(out(what, format!("{} bytes, at most {max}", value.len())));
    }
    if value.chars().any(char::is_control) {
        return Err(out(what, "holds control characters"));
    }
    Ok(())
}

/// A node's labels: at most 64, keys of 1 to 128 bytes, values of at most
/// 256, no control characters.
pub fn labels<'a>(
    labels: impl ExactSizeIterator<Item = (&'a String, &'a String)>,
) -> Result<(), OutOfBounds> {
    if labels.len() > LABELS_MAX {
        return Err(out(
            "labels",
            format!("{} of them, at most {LABELS_MAX}", labels.len()),
        ));
    }
    for (key, value) in labels {
        if key.is_empty() {
            return Err(out("a label", "has an empty key"));
        }
        text(format_args!("label key {:?}", shown(key)), key, LABEL_KEY_MAX)?;
        text(format_args!("label {key:?}"), value, LABEL_VALUE_MAX)?;
    }
    Ok(())
}

/// Topology segments (a plugin's, as a node reports them).
pub fn segments(what: &str, segments: &BTreeMap<String, String>) -> Result<(), OutOfBounds> {
    if segments.len() > TOPOLOGY_SEGMENTS_MAX {
        return Err(out(
            what,
            format!(
                "{} topology segments, at most {TOPOLOGY_SEGMENTS_MAX}",
                segments.len()
            ),
        ));
    }
    for (key, value) in segments {
        text(format_args!("{what}: topology key"), key, LABEL_KEY_MAX)?;
        text(format_args!("{what}: topology {key:?}"), value, LABEL_VALUE_MAX)?;
    }
    Ok(())
}

/// A directory an agent names: absolute, no `..`, at most 1,024 bytes.
pub fn dir(what: &str, path: &str) -> Result<(), OutOfBounds> {
    text(what, path, DIR_MAX)?;
    let p = std::path::Path::new(path);
    if !p.is_absolute() {
        return Err(out(format!("{what} {path:?}"), "must be absolute"));
    }
    if p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(out(format!("{what} {path:?}"), "must not hold '..'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_volume_names_follow_dockers_rule() {
        for ok in ["v", "pg-data", "db_1.main", "0abc", &"a".repeat(VOLUME_NAME_MAX)] {
            assert_eq!(volume_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "../etc",
            "vol/a",
            "my vol",
            ".hidden",
            "a:b",
            "-dash",
            "_under",
            "é",
            &"a".repeat(VOLUME_NAME_MAX + 1),
        ] {
            let e = volume_name(bad).unwrap_err().to_string();
            assert!(e.contains("Docker's rule"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn plain_names_are_one_path_component() {
        for ok in [
            "0194a1b2c3d4e5f60718293a4b5c6d7e",
            "a",
            "v-1_x.y",
            &"a".repeat(PLAIN_MAX),
        ] {
            assert_eq!(plain("id", ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "/abs",
            ".hidden",
            "a b",
            "é",
            "a\0",
            &"a".repeat(PLAIN_MAX + 1),
        ] {
            assert!(plain("id", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn labels_are_bounded_in_count_and_size() {
        let many: BTreeMap<String, String> =
            (0..=LABELS_MAX).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(labels(many.iter()).unwrap_err().why.contains("65 of them"));
        let long: BTreeMap<String, String> = [("k".to_string(), "v".repeat(LABEL_VALUE_MAX + 1))].into();
        assert!(labels(long.iter()).is_err());
        let control: BTreeMap<String, String> = [("k".to_string(), "a\nb".to_string())].into();
        assert!(labels(control.iter()).is_err());
        let empty: BTreeMap<String, String> = [(String::new(), "v".to_string())].into();
        assert!(labels(empty.iter()).is_err());
        let fine: BTreeMap<String, String> = [("zone".to_string(), "a".to_string())].into();
        assert_eq!(labels(fine.iter()), Ok(()));
    }

    #[test]
    fn directories_are_absolute_without_parents() {
        assert_eq!(dir("staging_dir", "/var/lib/berth/staging"), Ok(()));
        for bad in [
            "relative",
            "/var/../etc",
            "",
            &format!("/{}", "a".repeat(DIR_MAX)),
        ] {
            assert!(dir("staging_dir", bad).is_err(), "{bad:?}");
        }
    }
}
