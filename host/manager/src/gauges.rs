//! The manager's current state as Prometheus gauges, read at scrape time.

use crate::VolumeManager;
use crate::nodes::NodeState;
use berth_csi::registry::Health;
use berth_metrics::live::{Gauges, Observed};

impl Observed for VolumeManager {
    fn observe(&self, out: &mut Gauges) {
        let counts = self.table.counts();
        for (state, n) in &counts.states {
            out.gauge(
                "berth_volumes",
                "Volumes by state",
                vec![("state", state.to_string())],
                *n as i64,
            );
        }
        out.gauge(
            "berth_volumes_retrying",
            "Volumes waiting to retry a failed call",
            vec![],
            counts.retrying as i64,
        );
        out.gauge(
            "berth_volumes_waiting",
            "Volumes that cannot progress until something else happens (a node's agent, a fingerprint...)",
            vec![],
            counts.waiting as i64,
        );
        out.gauge(
            "berth_volumes_held_as_stored",
            "Volumes held in memory as the store holds them (not changed since the start): each is decoded when read",
            vec![],
            counts.held_as_stored as i64,
        );
        let (ready, running) = self.work.queue.depth();
        out.gauge(
            "berth_queue_depth",
            "Volumes queued for a worker",
            vec![],
            ready as i64,
        );
        out.gauge(
            "berth_operations_in_flight",
            "Volumes a worker is driving now",
            vec![],
            running as i64,
        );
        for p in self.registry.list() {
            out.gauge(
                "berth_plugin_healthy",
                "1 while a controller plugin's last fingerprints succeeded",
                vec![("plugin", p.id().to_string())],
                i64::from(p.status().health == Health::Healthy),
            );
        }
        let summaries = self.node_summaries();
        for state in NodeState::ALL {
            out.gauge(
                "berth_nodes",
                "Nodes by state (ready: the agent is connected and heard from)",
                vec![("state", state.as_str().to_string())],
                summaries.iter().filter(|n| n.state == state).count() as i64,
            );
        }
        for n in summaries {
            out.gauge(
                "berth_node_ready",
                "1 while a node's agent is connected and heard from",
                vec![("node", n.name.clone())],
                i64::from(n.state == NodeState::Ready),
            );
            for (plugin, status) in &n.plugins {
                out.gauge(
                    "berth_node_plugin_healthy",
                    "1 while a node plugin's last fingerprints on its node succeeded",
                    vec![("node", n.name.clone()), ("plugin", plugin.clone())],
                    i64::from(status.health == Health::Healthy),
                );
            }
        }
    }
}
