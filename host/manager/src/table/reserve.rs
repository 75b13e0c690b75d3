//! Room in a namespace's quota taken ahead of a change that grows what the
//! namespace holds (a volume's growth, a new snapshot), so that the check
//! and the change are one: the room is taken under the table's lock,
//! against what the namespace holds and what other changes under way
//! took, and given back when the change is written (then the record
//! itself counts) or fails. New volumes are admitted under the same lock
//! (`insert_new`), counting these reservations too.

use berth_model::Namespace;

use super::VolumeTable;
use crate::RequestError;
use crate::quotas::Usage;

/// Room taken in a namespace's quota, given back when dropped.
#[must_use = "the room is given back when the reservation is dropped"]
pub struct Reservation<'a> {
    table: &'a VolumeTable,
    namespace: Namespace,
    usage: Usage,
}

/// What `namespace` holds now, reservations aside (what an admission
/// module is told).
pub fn held(table: &VolumeTable, namespace: &Namespace) -> Usage {
    table.lock().usage.get(namespace).copied().unwrap_or_default()
}

impl<'a> Reservation<'a> {
    /// Takes `more` of `namespace`'s quota in `table` if `admit` allows
    /// it, judged on what the namespace holds and what is reserved there.
    pub fn take(
        table: &'a VolumeTable,
        namespace: &Namespace,
        more: Usage,
        admit: impl FnOnce(&Usage) -> Result<(), RequestError>,
    ) -> Result<Reservation<'a>, RequestError> {
        let mut s = table.lock();
        admit(&s.taken(namespace))?;
        s.reserved.entry(namespace.clone()).or_default().add(&more, true);
        Ok(Reservation {
            table,
            namespace: namespace.clone(),
            usage: more,
        })
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut s = self.table.lock();
        if let Some(reserved) = s.reserved.get_mut(&self.namespace) {
            reserved.add(&self.usage, false);
            if *reserved == Usage::default() {
                s.reserved.remove(&self.namespace);
            }
        }
    }
}
