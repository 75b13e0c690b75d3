//! Adding a volume under a new name: the name reserved, the record made
//! durable, and a repeat of the same request answered only from what was
//! written.

use crate::Taken;
use berth_model::VolumeRecord;

use super::{Inserted, VolumeTable, unavailable};
use crate::RequestError;
use crate::quotas::Usage;

impl VolumeTable {
    /// Adds a new volume under its operator name, durably. `same` says
    /// whether a live volume already holding the name is the same request
    /// (then it is returned instead); otherwise the name is a conflict.
    /// `admit` decides, from what the namespace holds, whether a new
    /// volume may be added there.
    ///
    /// A volume is answered only once its write is durable: the request that
    /// reserves a name holds the new volume's lock until its write is done,
    /// and a second request for the same volume waits for that lock (the
    /// nemesis saw a repeated create answered OK from a reservation whose
    /// write a deposed leader never made).
    pub async fn insert_new(
        &self,
        record: VolumeRecord,
        same: impl Fn(&VolumeRecord) -> bool,
        admit: impl Fn(&Usage) -> Result<(), RequestError>,
    ) -> Result<Inserted, RequestError> {
        loop {
            let held = self.locks.hold(&record.id).await;
            let existing = {
                let mut s = self.lock();
                // A name whose record does not decode (logged as it was
                // read) stays taken, as if its spec differed.
                let named = s.named(record.spec.namespace.as_str(), &record.spec.name);
                let existing = named.map(|i| s.volumes.get(i).map(|r| (same(&r), r.deleting, r.id.clone())));
                match existing {
                    Some(Some((true, false, id))) => Some(id),
                    Some(existing) => {
                        return Err(Taken::VolumeSpec {
                            name: record.spec.volume_name().to_string(),
                            deleting: existing.is_some_and(|(_, deleting, _)| deleting),
                        }
                        .into());
                    }
                    None => {
                        // Admitted against what the namespace holds (and what
                        // changes under way reserved) under the lock that
                        // reserves the name: two requests cannot both take
                        // the last of a quota.
                        admit(&s.taken(&record.spec.namespace))?;
                        // Reserve the name before the write, so two requests cannot both take it.
                        s.insert(record.clone());
                        None
                    }
                }
            };
            let Some(id) = existing else {
                if let Err(e) = self.store.put(&record).await {
                    self.lock().remove(&record.id);
                    return Err(unavailable("the volume", e));
                }
                drop(held);
                self.changed();
                return Ok(Inserted::New(record));
            };
            drop(held);
            // Once the reserving request is done with it, the volume is durable or gone.
            let _done = self.locks.hold(&id).await;
            if let Some(r) = self.by_id(&id).filter(|r| same(r) && !r.deleting) {
                return Ok(Inserted::Existing(r));
            }
            // Its write failed: this request makes the volume itself.
        }
    }
}
