//! The names a volume claims beside its own: CSI names and snapshot (and
//! group snapshot) names, each unique, claimed before the record that
//! holds it is written and given up if that write does not happen.

use berth_model::Namespace;

use super::indexes::snapshot_key;
use super::{TakenBy, VolumeTable};

/// The table as the names volumes claim are taken and given up.
pub struct Claims<'a> {
    table: &'a VolumeTable,
}

impl VolumeTable {
    /// CSI names and snapshot names: taken and given up.
    pub fn claims(&self) -> Claims<'_> {
        Claims { table: self }
    }
}

impl Claims<'_> {
    /// Claims a CSI name for volume `id`; false when another volume has it.
    /// The claim is undone by [`Claims::release_csi_name`] if the name
    /// is not recorded after all.
    pub fn claim_csi_name(&self, name: &str, id: &str) -> bool {
        let mut s = self.table.lock();
        match s.csi_names.get(name) {
            Some(owner) => owner == id,
            None => {
                s.csi_names.insert(name.to_string(), id.to_string());
                true
            }
        }
    }

    pub fn release_csi_name(&self, name: &str, id: &str) {
        let mut s = self.table.lock();
        let recorded = s
            .volumes
            .get(id)
            .is_some_and(|v| v.csi_name.as_deref() == Some(name));
        if !recorded && s.csi_names.get(name).is_some_and(|owner| owner == id) {
            s.csi_names.remove(name);
        }
    }

    /// The id of the volume a snapshot of `namespace` is of.
    pub fn snapshot_owner(&self, namespace: &Namespace, name: &str) -> Option<String> {
        self.table
            .lock()
            .snapshots
            .get(&snapshot_key(namespace, name))
            .cloned()
    }

    /// Claims a snapshot name for volume `id`; the owner's id when another
    /// volume has it. Undone by [`Claims::release_snapshot_name`] if
    /// the snapshot is not recorded after all.
    pub fn claim_snapshot_name(&self, namespace: &Namespace, name: &str, id: &str) -> Result<(), TakenBy> {
        let mut s = self.table.lock();
        let key = snapshot_key(namespace, name);
        match s.snapshots.get(&key) {
            Some(owner) if owner != id => Err(TakenBy(owner.clone())),
            Some(_) => Ok(()),
            None => {
                s.snapshots.insert(key, id.to_string());
                Ok(())
            }
        }
    }

    /// How many group snapshots a volume is a member of.
    pub fn grouped(&self, id: &str) -> u32 {
        self.table.lock().grouped.get(id).copied().unwrap_or(0)
    }

    pub fn release_snapshot_name(&self, namespace: &Namespace, name: &str, id: &str) {
        let mut s = self.table.lock();
        let recorded = s
            .volumes
            .get(id)
            .is_some_and(|v| v.snapshots.contains_key(name) || v.group_snapshots.contains_key(name));
        let key = snapshot_key(namespace, name);
        if !recorded && s.snapshots.get(&key).is_some_and(|owner| owner == id) {
            s.snapshots.remove(&key);
        }
    }
}
