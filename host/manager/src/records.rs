//! Every volume record in memory, by id, at the cost of one pointer a slot.
//!
//! A map from the id to the record kept the id twice (the key and the
//! record's own) and a whole record in every slot, empty slots included: a
//! table sized to a power of two is up to half empty, which at a million
//! volumes cost more than the records' texts. Here a slot is a pointer to
//! the boxed record and the record's own id is the key.
//!
//! Invariant: a record is found under the id it holds; its id never changes
//! while it is here (a changed record replaces the old one under its id).

use std::hash::BuildHasher;

use berth_model::VolumeRecord;
use hashbrown::{DefaultHashBuilder, HashTable};

#[derive(Default)]
pub(crate) struct Records {
    table: HashTable<Box<VolumeRecord>>,
    hasher: DefaultHashBuilder,
}

impl Records {
    fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn get(&self, id: &str) -> Option<&VolumeRecord> {
        self.table.find(self.hash(id), |r| r.id == id).map(|b| &**b)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut VolumeRecord> {
        let hash = self.hash(id);
        self.table.find_mut(hash, |r| r.id == id).map(|b| &mut **b)
    }

    /// Adds a record whose id is not here yet (see [`Records::get_mut`] to
    /// replace one).
    pub(crate) fn insert_new(&mut self, record: VolumeRecord) {
        let hash = self.hash(&record.id);
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, Box::new(record), |r| hasher.hash_one(r.id.as_str()));
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<VolumeRecord> {
        let hash = self.hash(id);
        match self.table.find_entry(hash, |r| r.id == id) {
            Ok(entry) => Some(*entry.remove().0),
            Err(_) => None,
        }
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &VolumeRecord> {
        self.table.iter().map(|b| &**b)
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = &str> {
        self.values().map(|r| r.id.as_str())
    }

    /// Room for `more` records without growing on the way.
    pub(crate) fn reserve(&mut self, more: usize) {
        let hasher = &self.hasher;
        self.table.reserve(more, |r| hasher.hash_one(r.id.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::VolumeSpec;

    fn record(id: &str, generation: u64) -> VolumeRecord {
        let mut r = VolumeRecord::new(id.into(), VolumeSpec::default());
        r.generation = generation;
        r
    }

    #[test]
    fn records_are_found_replaced_and_removed_by_their_own_id() {
        let mut records = Records::default();
        records.reserve(3);
        for i in 0..1000 {
            records.insert_new(record(&format!("{i:032x}"), i));
        }
        assert_eq!(records.len(), 1000);
        assert_eq!(records.get(&format!("{:032x}", 7)).map(|r| r.generation), Some(7));
        assert!(records.get("missing").is_none());

        records.get_mut(&format!("{:032x}", 7)).unwrap().generation = 70;
        assert_eq!(
            records.get(&format!("{:032x}", 7)).map(|r| r.generation),
            Some(70)
        );

        let gone = records.remove(&format!("{:032x}", 9)).expect("was there");
        assert_eq!(gone.generation, 9);
        assert!(records.remove(&format!("{:032x}", 9)).is_none());
        assert_eq!(records.len(), 999);
        let mut ids: Vec<&str> = records.ids().collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 999);
        assert_eq!(records.values().map(|r| r.generation).max(), Some(999));
    }
}
