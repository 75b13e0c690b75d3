//! The first cases: who the endpoints are (GetPluginInfo, Probe, the
//! capability calls, NodeGetInfo), and, for a split driver, that the node
//! endpoint is the same driver and reports the same plugin capabilities.

use berth_csi::fingerprint::{self, Fingerprint, Role};

use crate::{Rule, Run, Why, expect};

impl Run<'_> {
    /// Fingerprints the endpoints; false when nothing else can run.
    pub(crate) async fn identity(&mut self) -> bool {
        const IDENTITY: Rule = (
            "plugin identity",
            "GetPluginInfo, Probe and the capability calls answer as the spec says",
        );
        let first_role = if self.opts.node_endpoint.is_some() {
            Role::Controller
        } else {
            Role::Any
        };
        let fp = match fingerprint::fingerprint(&self.opts.endpoint, first_role).await {
            Ok(fp) => fp,
            Err(e) => {
                self.record(IDENTITY, Err(expect::describe(&e)));
                return false;
            }
        };
        let node_fp = match &self.opts.node_endpoint {
            Some(client) => match fingerprint::fingerprint(client, Role::Node).await {
                Ok(n) => Some(n),
                Err(e) => {
                    self.record(
                        IDENTITY,
                        Err(Why::from(format!("node endpoint: {}", expect::describe(&e)))),
                    );
                    return false;
                }
            },
            None => None,
        };
        let not_ready: Vec<&str> = [Some(&fp), node_fp.as_ref()]
            .into_iter()
            .flatten()
            .filter(|f| !f.ready)
            .map(|f| f.endpoint.as_str())
            .collect();
        if !not_ready.is_empty() {
            self.record(
                IDENTITY,
                Err(Why::from(format!(
                    "Probe says not ready at {}; try again once it is",
                    not_ready.join(", ")
                ))),
            );
            return false;
        }
        self.record(IDENTITY, Ok(()));
        if let Some(n) = &node_fp {
            self.record(
                (
                    "node endpoint",
                    "belongs to the same driver as the controller endpoint",
                ),
                if n.name == fp.name {
                    Ok(())
                } else {
                    Err(Why::from(format!(
                        "the controller is {:?}, the node {:?}",
                        fp.name, n.name
                    )))
                },
            );
            self.record(
                (
                    "node endpoint capabilities",
                    "every instance of one driver version reports the same plugin capabilities, \
                     whichever services it serves (CSI: GetPluginCapabilities)",
                ),
                same_plugin_capabilities(&fp, n),
            );
        }
        if fp.controller.is_some() {
            self.controller = Some(self.opts.endpoint.clone());
        }
        self.node = match (&node_fp, &fp.node) {
            (Some(_), _) => self.opts.node_endpoint.clone(),
            (None, Some(_)) => Some(self.opts.endpoint.clone()),
            (None, None) => None,
        };
        self.fingerprint = Some(fp);
        self.node_fingerprint = node_fp;
        true
    }
}

/// Whether the node endpoint reports the controller endpoint's plugin
/// capabilities: a CO that reads them from a node process (csi-sanity does)
/// would otherwise skip ControllerPublishVolume that the node then needs.
/// Instances of another vendor_version may differ.
fn same_plugin_capabilities(controller: &Fingerprint, node: &Fingerprint) -> Result<(), Why> {
    if controller.vendor_version != node.vendor_version {
        return Ok(());
    }
    let sorted = |f: &Fingerprint| {
        let mut caps = f.plugin_capabilities.clone();
        caps.sort();
        caps
    };
    let (c, n) = (sorted(controller), sorted(node));
    if c == n {
        return Ok(());
    }
    let missing: Vec<&String> = c.iter().filter(|x| !n.contains(x)).collect();
    let extra: Vec<&String> = n.iter().filter(|x| !c.contains(x)).collect();
    Err(Why::from(format!(
        "the node endpoint leaves out {missing:?} and adds {extra:?} to what the controller endpoint reports \
         (vendor_version {:?} on both)",
        node.vendor_version
    )))
}
