//! Short texts that many records repeat — a policy module's name, its
//! digest, a node's name in a placement note — kept once in memory
//! however many records hold them. A million volumes placed by the same
//! module held a million copies of its 71-byte digest.
//!
//! The table of kept texts is bounded: texts longer than [`INTERNED_LEN`]
//! are never kept, and once [`INTERNED_MAX`] texts are kept those no record
//! holds any more are dropped; if all are still held, a new text gets a copy
//! of its own. So a sender of many different names costs what the copies
//! cost, never a table that only grows.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest text kept shared.
pub const INTERNED_LEN: usize = 128;
/// The most texts kept shared at once.
pub const INTERNED_MAX: usize = 4096;

static KEPT: Mutex<Option<HashSet<Arc<str>>>> = Mutex::new(None);

/// A text shared by every record that holds it; reads and compares as a `str`.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interned(Arc<str>);

impl Interned {
    pub fn new(text: &str) -> Interned {
        if text.is_empty() || text.len() > INTERNED_LEN {
            return Interned(text.into());
        }
        let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        let kept = kept.get_or_insert_with(HashSet::new);
        if let Some(shared) = kept.get(text) {
            return Interned(shared.clone());
        }
        if kept.len() >= INTERNED_MAX {
            // Only the table holds these: no record needs them kept.
            kept.retain(|t| Arc::strong_count(t) > 1);
        }
        let shared: Arc<str> = text.into();
        if kept.len() < INTERNED_MAX {
            kept.insert(shared.clone());
        }
        Interned(shared)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Interned {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Interned {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Interned {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Interned {
    fn from(text: &str) -> Interned {
        Interned::new(text)
    }
}

impl From<String> for Interned {
    fn from(text: String) -> Interned {
        Interned::new(&text)
    }
}

impl From<&String> for Interned {
    fn from(text: &String) -> Interned {
        Interned::new(text)
    }
}

impl PartialEq<str> for Interned {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Interned {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Interned {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl fmt::Display for Interned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Interned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Written as the plain string it is: records keep their form on disk.
impl Serialize for Interned {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Interned {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Interned, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Interned;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Interned, E> {
                Ok(Interned::new(v))
            }
        }
        d.deserialize_str(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests share the one table: one filling it would give the other copies.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    #[test]
    fn a_repeated_text_is_one_copy_and_reads_as_written() {
        let _table = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let a: Interned = serde_json::from_str(r#""berth_naming_guest""#).unwrap();
        let b = Interned::from(String::from("berth_naming_guest"));
        assert!(Arc::ptr_eq(&a.0, &b.0), "one copy for both");
        assert_eq!(a, "berth_naming_guest");
        assert_eq!(serde_json::to_string(&b).unwrap(), r#""berth_naming_guest""#);
        let escaped: Interned = serde_json::from_str(r#""a\"b""#).unwrap();
        assert_eq!(escaped.as_str(), "a\"b");
        let long = "x".repeat(INTERNED_LEN + 1);
        assert!(!Arc::ptr_eq(&Interned::new(&long).0, &Interned::new(&long).0));
    }

    #[test]
    fn the_table_stays_bounded_and_drops_texts_no_one_holds() {
        let _table = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let held: Vec<Interned> = (0..INTERNED_MAX)
            .map(|i| Interned::new(&format!("held-{i}")))
            .collect();
        // Full of held texts: new ones get copies of their own, and the table does not grow.
        let size = || KEPT.lock().unwrap().as_ref().map_or(0, HashSet::len);
        let more: Vec<Interned> = (0..100).map(|i| Interned::new(&format!("more-{i}"))).collect();
        assert_eq!(more[7], "more-7");
        assert!(size() <= INTERNED_MAX);
        drop(held);
        // Nobody holds them now: the next new text makes room by dropping them.
        let shared = Interned::new("after-the-sweep");
        assert!(size() < INTERNED_MAX);
        assert!(Arc::ptr_eq(&shared.0, &Interned::new("after-the-sweep").0));
    }
}
