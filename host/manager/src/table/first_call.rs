//! A publication's first call, and a volume's first CreateVolume: whether
//! it may go out, decided under the volume's lock against the record, a
//! request's note (`uncalled`) and a write the store may have kept though
//! it failed (`unsure`).

use super::{Uncalled, VolumeTable, unavailable};
use crate::RequestError;

impl VolumeTable {
    /// Whether the durable record has the publication on `node` marked sent.
    pub fn publication_sent(&self, id: &str, node: &str) -> bool {
        self.lock()
            .volumes
            .get(id)
            .and_then(|r| r.publications.get(node))
            .is_some_and(|p| p.sent)
    }

    /// Publications a request marked sent whose first call has not gone out.
    pub fn uncalled(&self) -> &Uncalled {
        &self.uncalled
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
    pub async fn first_call(&self, id: &str, node: &str) -> Result<bool, RequestError> {
        let _held = self.locks.hold(id).await;
        self.uncalled.withdraw(id, node);
        let stands = self
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
    /// Decided under the volume's lock as [`VolumeTable::first_call`] is.
    /// A volume its request marked is vouched for as a publication is: a
    /// delete's write that failed may have been kept, unmarking it. One
    /// called before stays called, whatever a later write says.
    pub async fn first_create(&self, id: &str) -> Result<bool, RequestError> {
        let _held = self.locks.hold(id).await;
        let stands = self.lock().volumes.get(id).is_some_and(|r| r.create_sent);
        // The note stays until the record is vouched for: a try that
        // could not write it leaves the next try to.
        if stands && self.uncalled.create_noted(id) {
            self.vouch(id).await?;
        }
        self.uncalled.withdraw_create(id);
        Ok(stands)
    }

    /// Under the volume's lock, before a first call: the record as held
    /// here written again if a failed write may have been kept. The common
    /// case, a record as stored, is decided without a copy.
    async fn vouch(&self, id: &str) -> Result<(), RequestError> {
        if self.unsure.holds(id)
            && let Some(mut record) = self.by_id(id)
        {
            record.generation += 1;
            self.unsure
                .put(&*self.store, &record)
                .await
                .map_err(|e| unavailable("the volume's record, before its first call", e))?;
            self.lock().insert(record);
            self.changed();
        }
        Ok(())
    }
}
