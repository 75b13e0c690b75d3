//! A publication's first call, and a volume's first CreateVolume: whether
//! it may go out, decided under the volume's lock against the record, a
//! request's note (`uncalled`) and a write the store may have kept though
//! it failed (`unsure`).

use super::{Uncalled, VolumeTable, unavailable};
use crate::RequestError;

/// The table as the worker sees it before a first call.
pub struct FirstCalls<'a> {
    table: &'a VolumeTable,
}

impl VolumeTable {
    /// Publications a request marked sent whose first call has not gone out.
    pub fn uncalled(&self) -> &Uncalled {
        &self.uncalled
    }

    /// What decides a first call.
    pub fn first_calls(&self) -> FirstCalls<'_> {
        FirstCalls { table: self }
    }
}

impl FirstCalls<'_> {
    /// Whether the durable record has the publication on `node` marked sent.
    pub fn publication_sent(&self, id: &str, node: &str) -> bool {
        self.table
            .lock()
            .volumes
            .get(id)
            .is_some_and(|r| r.publications.get(node).is_some_and(|p| p.sent))
    }

    /// Before the first call for a publication marked sent: whether it may
    /// go out. Decided under the volume's lock, so in turn with the changes
    /// that would withdraw it (the record and a request's note agree only
    /// there); the note, if any, goes either way.
    ///
    /// A write of the record that failed may have been kept all the same
    /// (etcd's answer lost on the way): the store may then say the
    /// publication was withdrawn, unsent, and a next leader would drop it
    /// without a call. So the record as held here is written again first,
    /// and nothing goes out until the store has taken it.
    pub async fn publication(&self, id: &str, node: &str) -> Result<bool, RequestError> {
        let _held = self.table.locks.hold(id).await;
        self.table.uncalled.withdraw(id, node);
        let stands = self
            .table
            .lock()
            .volumes
            .get(id)
            .is_some_and(|r| !r.deleting && r.publications.get(node).is_some_and(|p| p.wanted && p.sent));
        if stands {
            self.vouch(id).await?;
        }
        Ok(stands)
    }

    /// Before CreateVolume for a volume marked sent: whether it may go out
    /// (a delete unmarked it if its request's note was still there).
    /// Decided under the volume's lock as [`FirstCalls::publication`] is.
    /// A volume its request marked is vouched for as a publication is: a
    /// delete's write that failed may have been kept, unmarking it. One
    /// called before stays called, whatever a later write says.
    pub async fn create(&self, id: &str) -> Result<bool, RequestError> {
        let _held = self.table.locks.hold(id).await;
        let stands = self.table.lock().volumes.get(id).is_some_and(|r| r.create_sent);
        // The note stays until the record is vouched for: a try that
        // could not write it leaves the next try to.
        if stands && self.table.uncalled.create_noted(id) {
            self.vouch(id).await?;
        }
        self.table.uncalled.withdraw_create(id);
        Ok(stands)
    }

    /// Under the volume's lock, before a first call: the record as held
    /// here written again if a failed write may have been kept. The common
    /// case, a record as stored, is decided without a copy.
    async fn vouch(&self, id: &str) -> Result<(), RequestError> {
        let t = self.table;
        if t.unsure.holds(id)
            && let Some(mut record) = t.by_id(id)
        {
            record.generation += 1;
            t.unsure
                .put(&*t.store, &record)
                .await
                .map_err(|e| unavailable("the volume's record, before its first call", e))?;
            t.lock().insert(record);
            t.changed();
        }
        Ok(())
    }
}
