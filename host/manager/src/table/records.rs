//! Every volume record in memory, by the id it holds: one pointer a slot
//! (see [`berth_model::ById`]).
//!
//! A record is held decoded, or as the store holds it (its text): a start
//! reads only what the indexes need of each record, so the API answers
//! before a million records are built, and a record nobody changes costs
//! its text (about half its decoded size) for the server's life.
//!
//! Invariant: an id is held one way or the other, never both. A stored
//! record is decoded each time it is read, and held decoded from its first
//! change on (a change is made to a decoded record and replaces the text).

use std::borrow::Cow;
use std::sync::Arc;

use berth_model::{ById, Identified, RecordKeys, VolumeRecord};

/// A record held as the store holds it; shared, so a walk of every record
/// reads the texts after letting go of the table.
pub(crate) struct Stored(Arc<Text>);

pub(crate) struct Text {
    id: String,
    text: Arc<[u8]>,
}

impl Identified for Stored {
    fn id(&self) -> &str {
        &self.0.id
    }
}

impl Text {
    /// The record the text holds; a text that does not decode is logged
    /// and reads as no record (it stays as stored: nothing overwrites it,
    /// and `berth store check` names it).
    pub(crate) fn decode(&self) -> Option<VolumeRecord> {
        match berth_store::decode(&self.id, &self.text) {
            Ok(r) => Some(r),
            Err(error) => {
                tracing::error!(volume = %self.id, %error, "a stored record does not decode; it reads as no volume until it is mended");
                None
            }
        }
    }

    /// What the indexes read of the record, from its text.
    pub(crate) fn keys(&self) -> Option<RecordKeys> {
        serde_json::from_slice(&self.text)
            .inspect_err(
                |error| tracing::error!(volume = %self.id, %error, "the keys of a stored record do not read"),
            )
            .ok()
    }
}

impl Stored {
    pub(crate) fn text(&self) -> &Text {
        &self.0
    }
}

#[derive(Default)]
pub(crate) struct Records {
    decoded: ById<VolumeRecord>,
    stored: ById<Stored>,
}

impl Records {
    pub(crate) fn len(&self) -> usize {
        self.decoded.len() + self.stored.len()
    }

    /// How many are held as stored.
    pub(crate) fn stored_len(&self) -> usize {
        self.stored.len()
    }

    /// Room for `more` records held as stored, or decoded.
    pub(crate) fn reserve(&mut self, more: usize, stored: bool) {
        match stored {
            true => self.stored.reserve(more),
            false => self.decoded.reserve(more),
        }
    }

    /// Whether the table holds `id`, however it is held.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.decoded.get(id).is_some() || self.stored.get(id).is_some()
    }

    /// The record of `id`: borrowed if held decoded, decoded if stored.
    pub(crate) fn get(&self, id: &str) -> Option<Cow<'_, VolumeRecord>> {
        match self.decoded.get(id) {
            Some(r) => Some(Cow::Borrowed(r)),
            None => self.stored.get(id)?.0.decode().map(Cow::Owned),
        }
    }

    /// The generation of the record of `id`: of a stored one, read from
    /// its text without decoding the rest.
    pub(crate) fn generation(&self, id: &str) -> Option<u64> {
        #[derive(serde::Deserialize)]
        struct Generation {
            generation: u64,
        }
        match self.decoded.get(id) {
            Some(r) => Some(r.generation),
            None => serde_json::from_slice::<Generation>(&self.stored.get(id)?.0.text)
                .ok()
                .map(|g| g.generation),
        }
    }

    /// The text of a record held as stored.
    pub(crate) fn stored_text(&self, id: &str) -> Option<Arc<Text>> {
        self.stored.get(id).map(|s| s.0.clone())
    }

    /// A record held decoded, to change in place (never its id).
    pub(crate) fn decoded_mut(&mut self, id: &str) -> Option<&mut VolumeRecord> {
        self.decoded.get_mut(id)
    }

    pub(crate) fn decoded(&self, id: &str) -> Option<&VolumeRecord> {
        self.decoded.get(id)
    }

    /// Adds a decoded record whose id is not held either way.
    pub(crate) fn insert_new(&mut self, r: VolumeRecord) {
        self.decoded.insert_new(r);
    }

    /// Adds a stored record whose id is not held either way.
    pub(crate) fn insert_stored(&mut self, id: String, text: Arc<[u8]>) {
        self.stored.insert_new(Stored(Arc::new(Text { id, text })));
    }

    /// Takes out the stored text of `id`, if it is held so.
    pub(crate) fn take_stored(&mut self, id: &str) -> Option<Stored> {
        self.stored.remove(id)
    }

    /// Takes out the record of `id` if it is held decoded.
    pub(crate) fn remove_decoded(&mut self, id: &str) -> Option<VolumeRecord> {
        self.decoded.remove(id)
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = &str> {
        self.decoded.ids().chain(self.stored.ids())
    }

    /// The records held decoded, and the texts of those held as stored
    /// (shared, not copied: read them after letting go of the table).
    pub(crate) fn split(&self) -> (impl Iterator<Item = &VolumeRecord>, Vec<Arc<Text>>) {
        (
            self.decoded.values(),
            self.stored.values().map(|s| s.0.clone()).collect(),
        )
    }
}
