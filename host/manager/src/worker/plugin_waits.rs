//! What holds a volume's next steps back on its plugins' side: a plugin not
//! fingerprinted yet (its capabilities decide which steps exist), or a
//! controller that reports another driver than the one configured
//! (`driver` in berth.toml) — no call goes to a socket that is not the
//! driver asked for.

use crate::worker::Worker;
use std::sync::Arc;

use berth_csi::Fingerprint;
use berth_model::VolumeRecord;

impl Worker<'_> {
    /// Why the volume's next steps wait on a plugin, as `volume get` shows
    /// it; `None` when every plugin they can involve may be called. Only
    /// those are asked for: a volume that never reached its plugin is
    /// forgotten without any, and no node step comes before the volume exists.
    pub(crate) fn held_back(&self, r: &VolumeRecord) -> Option<String> {
        if r.deleting && r.backend.is_none() && (r.csi_name.is_none() || !r.create_sent) {
            return None;
        }
        let plugin = &r.spec.plugin;
        let config = self.config.plugin(plugin);
        let expected = config.and_then(|p| p.driver.as_deref());
        if config.is_some_and(|p| p.controller.is_some()) {
            let fingerprint = self.registry.get(plugin).and_then(|p| p.status().fingerprint);
            if let Some(why) = judged(fingerprint, expected, || format!("the controller of {plugin}")) {
                return Some(why);
            }
        }
        r.backend.as_ref()?;
        r.publications
            .iter()
            .filter(|(_, p)| p.sent || (p.wanted && !r.deleting))
            .find_map(|(node, _)| {
                // A node plugin's stored fingerprint (a node whose agent is
                // away) does not carry the driver's name: only its presence
                // is judged here; the agent checks its own plugins.
                let fingerprint = self.nodes.plugin_status(node, plugin).and_then(|s| s.fingerprint);
                judged(fingerprint, None, || {
                    format!("the node plugin of {plugin} on {node}")
                })
            })
    }
}

/// Why `what` may not be called yet, from its latest fingerprint; `what`
/// is named only when there is a reason (the hot path formats nothing).
fn judged(
    fingerprint: Option<Arc<Fingerprint>>,
    expected: Option<&str>,
    what: impl FnOnce() -> String,
) -> Option<String> {
    let Some(fp) = fingerprint else {
        return Some(format!("waiting for {} to be fingerprinted", what()));
    };
    match expected {
        Some(driver) if fp.name != driver => Some(format!(
            "held back: {} reports driver {:?}, not the configured {driver:?} (fix `driver` in berth.toml, or the socket it names)",
            what(),
            fp.name
        )),
        _ => None,
    }
}
