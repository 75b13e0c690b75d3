//! Namespaces: every volume (and with it its snapshots) belongs to one, and
//! a volume's name is unique within its namespace only. A caller names the
//! namespace it works in; what it may do there is its ACL's business.
//!
//! Invariants:
//! - A namespace's name is 1 to 63 lowercase ASCII letters, digits and '-',
//!   starting with a letter or a digit (a DNS label, as Kubernetes and Nomad
//!   have them), so it can never contain the '/' a [`VolumeName`] is shown
//!   with, nor be mistaken for the `*` that asks for every namespace.
//! - Records written before namespaces have none and read as
//!   [`Namespace::DEFAULT`]; a record in the default namespace is stored
//!   without the field, byte for byte as before.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Interned;
use crate::bounds::OutOfBounds;

/// The gRPC metadata naming the namespace a call of the Berth API works in
/// (the default namespace when absent).
pub const NAMESPACE_HEADER: &str = "berth-namespace";
/// What a list names for "every namespace the caller may list".
pub const EVERY_NAMESPACE: &str = "*";

/// The longest namespace name (a DNS label).
pub const NAMESPACE_MAX: usize = 63;

/// A namespace's name, checked.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(Interned);

impl Namespace {
    /// Where a volume is when no namespace is named.
    pub const DEFAULT: &'static str = "default";

    pub fn default_namespace() -> Namespace {
        Namespace(Interned::new(Self::DEFAULT))
    }

    /// A namespace named by a caller: refused unless it is a DNS label.
    pub fn parse(text: &str) -> Result<Namespace, OutOfBounds> {
        let ok = !text.is_empty()
            && text.len() <= NAMESPACE_MAX
            && text.as_bytes()[0].is_ascii_alphanumeric()
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(Namespace(Interned::new(text)))
        } else {
            Err(crate::bounds::out(
                format!("namespace {:?}", crate::text::echo(text)),
                format!(
                    "must be 1 to {NAMESPACE_MAX} lowercase letters, digits or '-', starting with a letter or a digit"
                ),
            ))
        }
    }

    /// A namespace a caller named, or the default one for an empty text.
    pub fn parse_or_default(text: &str) -> Result<Namespace, OutOfBounds> {
        if text.is_empty() {
            Ok(Namespace::default_namespace())
        } else {
            Namespace::parse(text)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_default(&self) -> bool {
        self.as_str() == Self::DEFAULT
    }
}

impl Default for Namespace {
    fn default() -> Namespace {
        Namespace::default_namespace()
    }
}

impl Borrow<str> for Namespace {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Namespace {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Namespace {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Namespace, D::Error> {
        let text = String::deserialize(d)?;
        Namespace::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// For `skip_serializing_if`: the default namespace is not written.
pub fn is_default(namespace: &Namespace) -> bool {
    namespace.is_default()
}

/// A volume's (or a snapshot's) name as a caller gives it: the name within
/// a namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VolumeName {
    pub namespace: Namespace,
    pub name: String,
}

impl VolumeName {
    pub fn new(namespace: Namespace, name: impl Into<String>) -> VolumeName {
        VolumeName {
            namespace,
            name: name.into(),
        }
    }
}

/// A bare name is in the default namespace (what callers from before
/// namespaces meant).
impl From<&str> for VolumeName {
    fn from(name: &str) -> VolumeName {
        VolumeName::new(Namespace::default_namespace(), name)
    }
}

impl From<&String> for VolumeName {
    fn from(name: &String) -> VolumeName {
        VolumeName::from(name.as_str())
    }
}

impl From<&VolumeName> for VolumeName {
    fn from(name: &VolumeName) -> VolumeName {
        name.clone()
    }
}

/// `name` in the default namespace, `namespace/name` in any other: the
/// form a person reads, and the one policy modules see (see the WIT's
/// `volume.name`), so two namespaces' volumes of one name never ask a
/// naming module for the same backend name.
impl fmt::Display for VolumeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_default() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_dns_labels() {
        for good in ["default", "team-a", "a", "0ps", &"x".repeat(63)] {
            assert!(Namespace::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Team",
            "team/a",
            "*",
            "-a",
            "a_b",
            "a.b",
            &"x".repeat(64),
            "é",
        ] {
            let e = Namespace::parse(bad).unwrap_err().to_string();
            assert!(e.contains("lowercase letters"), "{bad}: {e}");
        }
        assert!(Namespace::parse_or_default("").unwrap().is_default());
    }

    #[test]
    fn a_name_outside_the_default_namespace_shows_its_namespace() {
        assert_eq!(VolumeName::from("data").to_string(), "data");
        let qualified = VolumeName::new(Namespace::parse("team-a").unwrap(), "data");
        assert_eq!(qualified.to_string(), "team-a/data");
    }

    #[test]
    fn a_spec_from_before_namespaces_is_in_the_default_one_and_written_as_before() {
        let spec = crate::VolumeSpec {
            name: "data".into(),
            ..Default::default()
        };
        let written = serde_json::to_string(&spec).unwrap();
        assert!(!written.contains("namespace"), "{written}");
        let read: crate::VolumeSpec = serde_json::from_str(&written).unwrap();
        assert!(read.namespace.is_default());
        let elsewhere = crate::VolumeSpec {
            namespace: Namespace::parse("team-a").unwrap(),
            ..spec
        };
        let written = serde_json::to_string(&elsewhere).unwrap();
        let read: crate::VolumeSpec = serde_json::from_str(&written).unwrap();
        assert_eq!(read.volume_name().to_string(), "team-a/data");
    }

    #[test]
    fn a_stored_namespace_is_checked_when_read() {
        let ns: Namespace = serde_json::from_str("\"team-b\"").unwrap();
        assert_eq!(ns.as_str(), "team-b");
        assert!(serde_json::from_str::<Namespace>("\"../etc\"").is_err());
    }
}
