//! A map kept as a vector sorted by key. Volume records hold many maps of a
//! few entries each (parameters, labels, contexts, topology segments,
//! publications); as B-trees each would cost a node of several hundred bytes,
//! and Berth keeps every record in memory.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VecMap<V>(Vec<(String, V)>);

impl<V> Default for VecMap<V> {
    fn default() -> Self {
        VecMap(Vec::new())
    }
}

impl<V> VecMap<V> {
    pub const fn new() -> Self {
        VecMap(Vec::new())
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.find(key).ok().map(|i| &mut self.0[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key`, returning the value it had.
    pub fn insert(&mut self, key: String, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.reserve_exact(1);
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// The value of `key`, inserting `make()` first if there is none.
    pub fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(key) {
            Ok(i) => i,
            Err(i) => {
                self.0.reserve_exact(1);
                self.0.insert(i, (key.to_string(), make()));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Sets every key of `other`, keeping the rest.
    pub fn extend(&mut self, other: VecMap<V>) {
        for (k, v) in other.0 {
            self.insert(k, v);
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        let i = self.find(key).ok()?;
        let (_, v) = self.0.remove(i);
        self.0.shrink_to_fit();
        Some(v)
    }

    pub fn clear(&mut self) {
        self.0 = Vec::new();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// Sorts by key, keeping the last value of a repeated key, and drops spare capacity.
    fn normalize(mut entries: Vec<(String, V)>) -> Self {
        entries.reverse();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|later, earlier| later.0 == earlier.0);
        entries.shrink_to_fit();
        VecMap(entries)
    }
}

impl<V> FromIterator<(String, V)> for VecMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        VecMap::normalize(iter.into_iter().collect())
    }
}

impl<V, const N: usize> From<[(String, V); N]> for VecMap<V> {
    fn from(entries: [(String, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl<V> IntoIterator for VecMap<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, V> IntoIterator for &'a VecMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, (String, V)>, fn(&'a (String, V)) -> (&'a String, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<V> std::ops::Index<&str> for VecMap<V> {
    type Output = V;

    fn index(&self, key: &str) -> &V {
        self.get(key).unwrap_or_else(|| panic!("no entry {key:?}"))
    }
}

impl<V: fmt::Debug> fmt::Debug for VecMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: Serialize> Serialize for VecMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for VecMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<V>(std::marker::PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = VecMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map with string keys")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(access.size_hint().unwrap_or(0).min(64));
                while let Some(entry) = access.next_entry()? {
                    entries.push(entry);
                }
                Ok(VecMap::normalize(entries))
            }
        }

        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_sorted_map() {
        let mut m: VecMap<u32> = [("b".to_string(), 2), ("a".to_string(), 1), ("b".to_string(), 3)].into();
        assert_eq!(m.keys().map(String::as_str).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(m.get("b"), Some(&3), "the last of a repeated key wins");
        assert_eq!(m.insert("c".into(), 4), None);
        assert_eq!(m.insert("a".into(), 5), Some(1));
        *m.get_or_insert_with("d", || 0) += 7;
        assert_eq!(m.remove("b"), Some(3));
        assert_eq!(m.remove("zz"), None);
        assert_eq!(format!("{m:?}"), r#"{"a": 5, "c": 4, "d": 7}"#);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"{"a":5,"c":4,"d":7}"#);
        let back: VecMap<u32> = serde_json::from_str(r#"{"d":7,"a":5,"c":4}"#).unwrap();
        assert_eq!(back, m);
    }
}
