//! Values found by the id they hold, at the cost of one pointer a slot.
//!
//! A map from an id to a value keeps the id twice (the key and the value's
//! own) and a whole value in every slot, empty slots included: a table
//! sized to a power of two is up to half empty, which at a million volumes
//! cost more than the values' texts. Here a slot is a pointer to the boxed
//! value and the value's own id is the key. The server's volume records and
//! an agent's volumes are kept this way.
//!
//! Invariant: a value is found under the id it holds; its id never changes
//! while it is here (a changed value replaces the old one under its id).

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// A value that carries its own id.
pub trait Identified {
    fn id(&self) -> &str;
}

pub struct ById<T> {
    table: HashTable<Box<T>>,
    hasher: DefaultHashBuilder,
}

impl<T> Default for ById<T> {
    fn default() -> Self {
        Self {
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

impl<T: Identified> ById<T> {
    fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn get(&self, id: &str) -> Option<&T> {
        self.table.find(self.hash(id), |v| v.id() == id).map(|b| &**b)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut T> {
        let hash = self.hash(id);
        self.table.find_mut(hash, |v| v.id() == id).map(|b| &mut **b)
    }

    /// Adds a value whose id is not here yet (see [`ById::get_mut`] to
    /// change one).
    pub fn insert_new(&mut self, value: T) {
        let hash = self.hash(value.id());
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, Box::new(value), |v| hasher.hash_one(v.id()));
    }

    /// The value under `id`, made by `make` when there is none.
    pub fn get_or_insert_with(&mut self, id: &str, make: impl FnOnce() -> T) -> &mut T {
        let hash = self.hash(id);
        let hasher = &self.hasher;
        let entry = self
            .table
            .entry(hash, |v| v.id() == id, |v| hasher.hash_one(v.id()));
        let boxed = entry.or_insert_with(|| Box::new(make())).into_mut();
        debug_assert_eq!(boxed.id(), id, "a value made for an id holds that id");
        boxed
    }

    pub fn remove(&mut self, id: &str) -> Option<T> {
        let hash = self.hash(id);
        match self.table.find_entry(hash, |v| v.id() == id) {
            Ok(entry) => Some(*entry.remove().0),
            Err(_) => None,
        }
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.table.iter().map(|b| &**b)
    }

    /// Every value, to change in place (never its id).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.table.iter_mut().map(|b| &mut **b)
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.values().map(T::id)
    }

    /// Room for `more` values without growing on the way.
    pub fn reserve(&mut self, more: usize) {
        let hasher = &self.hasher;
        self.table.reserve(more, |v| hasher.hash_one(v.id()));
    }
}

impl<T: Identified> FromIterator<T> for ById<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        let mut table = ById::default();
        for value in values {
            match table.get_mut(value.id()) {
                Some(old) => *old = value,
                None => table.insert_new(value),
            }
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Thing {
        id: String,
        n: u64,
    }

    impl Identified for Thing {
        fn id(&self) -> &str {
            &self.id
        }
    }

    fn thing(i: u64) -> Thing {
        Thing {
            id: format!("{i:032x}"),
            n: i,
        }
    }

    #[test]
    fn values_are_found_changed_and_removed_by_their_own_id() {
        let mut things = ById::default();
        things.reserve(3);
        for i in 0..1000 {
            things.insert_new(thing(i));
        }
        assert_eq!(things.len(), 1000);
        assert_eq!(things.get(&format!("{:032x}", 7)).map(|t| t.n), Some(7));
        assert!(things.get("missing").is_none());

        things.get_mut(&format!("{:032x}", 7)).unwrap().n = 70;
        assert_eq!(things.get(&format!("{:032x}", 7)).map(|t| t.n), Some(70));

        let gone = things.remove(&format!("{:032x}", 9)).expect("was there");
        assert_eq!(gone.n, 9);
        assert!(things.remove(&format!("{:032x}", 9)).is_none());
        assert_eq!(things.len(), 999);
        let mut ids: Vec<&str> = things.ids().collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 999);
        assert_eq!(things.values().map(|t| t.n).max(), Some(999));
        for t in things.values_mut() {
            t.n += 1;
        }
        assert_eq!(things.values().map(|t| t.n).max(), Some(1000));
    }

    #[test]
    fn a_missing_id_is_made_once_and_then_found() {
        let mut things: ById<Thing> = ById::default();
        let id = format!("{:032x}", 5);
        things.get_or_insert_with(&id, || thing(5)).n = 50;
        let made = things.get_or_insert_with(&id, || panic!("made twice"));
        assert_eq!(made.n, 50);
        assert_eq!(things.len(), 1);
    }

    #[test]
    fn collected_values_keep_the_last_under_an_id() {
        let things: ById<Thing> = [thing(1), thing(2), Thing { n: 9, ..thing(1) }]
            .into_iter()
            .collect();
        assert_eq!(things.len(), 2);
        assert_eq!(things.get(&format!("{:032x}", 1)).map(|t| t.n), Some(9));
    }
}
