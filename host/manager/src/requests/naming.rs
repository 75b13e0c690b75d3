//! A new volume named by its create request: the naming decision (and the
//! placement decided with it) is made before the request's write, so the
//! write that acknowledges the request also marks CreateVolume sent under
//! that name, and the call needs no write of its own before it.
//!
//! Invariant: a volume its request marked sent has a note in `uncalled`
//! until its first CreateVolume goes out. A delete that finds the note
//! unmarks it in its own write, so a volume deleted before the call is
//! forgotten without one; after a restart (no notes) it may have been
//! called, and is created again by its name before it is deleted.

use berth_model::VolumeRecord;

use super::Requests;
use crate::worker::plan::Step;

impl Requests<'_> {
    /// Names the new volume `record` and marks it sent, noted as not
    /// called; the CSI name claimed, to be released if the volume is not
    /// made after all. None when it is left to the worker to name, as a
    /// volume by that name exists (answered as it is, or refused) or the
    /// policy failed (the worker asks again and reports it); or when the
    /// decision refused it (`record` is failed, as the worker would leave it).
    pub(crate) async fn name_ahead(&self, record: &mut VolumeRecord) -> Option<String> {
        // A server whose workers do not run (its policy set does not verify)
        // or that cannot vouch for its lease leaves it to the worker, which
        // waits until it may act.
        if !self.work.acting() || self.id_of(&self.in_namespace(&record.spec.name)).is_ok() {
            return None;
        }
        let mut placed = None;
        let named = self.decisions().name_volume(record, &mut placed).await.ok()?;
        named(record);
        let name = record.csi_name.clone()?;
        if self.config.events_per_volume > 0 {
            self.event(Step::Name.label(), "OK", format!("named {name}"))(record);
        }
        record.create_sent = true;
        self.table.uncalled().note_create(&record.id, placed);
        Some(name)
    }

    /// Undoes [`Requests::name_ahead`] for a volume not made after all.
    pub(crate) fn unname(&self, id: &str, name: Option<String>) {
        if let Some(name) = name {
            self.table.uncalled().withdraw_create(id);
            self.table.claims().release_csi_name(&name, id);
        }
    }
}
