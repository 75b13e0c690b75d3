//! Operators' requests about whole nodes: drain (undo every publication
//! there and keep placement away), forget (the node is dead: its node-side
//! steps are skipped so its volumes can be published elsewhere), remove.

use crate::Conflict;
use crate::Missing;
use crate::RequestError;
use crate::Unready;
use crate::fleet::Fleet;
use berth_model::NodeLevel;
use berth_store::NodeRecord;

impl Fleet<'_> {
    async fn remember_node(&self, record: Option<NodeRecord>, node: &str) -> Result<(), RequestError> {
        let record = record.ok_or_else(|| Missing::Node(node.to_string()))?;
        self.table
            .store()
            .put_node(&record)
            .await
            .map_err(|e| Unready::store("the node's change", e).into())
    }

    /// Names of volumes with a wanted publication on `node`.
    fn published_on_node(&self, node: &str) -> Vec<String> {
        self.table.collect_keys(|r, out| {
            if r.publications().get(node).is_some_and(|p| p.wanted) {
                out.push(r.name().to_owned());
            }
        })
    }

    /// Keeps placement away from `node` and unpublishes everything there
    /// (or, with `undo`, lets placement use it again). Returns how many
    /// publications are being undone.
    pub async fn drain_node(&self, node: &str, undo: bool) -> Result<u32, RequestError> {
        let record = self.nodes.mark(node, Some(!undo), false);
        self.remember_node(record, node).await?;
        if undo {
            tracing::info!(%node, "node no longer draining");
            return Ok(0);
        }
        let names = self.published_on_node(node);
        for name in &names {
            self.requests().unpublish(name, node).await?;
        }
        tracing::info!(%node, publications = names.len(), "node draining");
        Ok(names.len() as u32)
    }

    /// Declares `node` dead. Dangerous: whatever the node still has mounted
    /// stays there, while ControllerUnpublish lets the volume be published
    /// elsewhere. Refused without `force`.
    pub async fn forget_node(&self, node: &str, force: bool) -> Result<u32, RequestError> {
        if !force {
            return Err(RequestError::Invalid(format!(
                "forgetting node {node:?} declares it dead: its node-side unpublish and unstage are skipped and \
                 ControllerUnpublish runs, so its volumes can be published elsewhere even if the node still writes \
                 to them. Drain it instead if it is alive; if it is truly gone, ask again with --force"
            )));
        }
        let record = self.nodes.mark(node, None, true);
        self.remember_node(record, node).await?;
        let ids = self.ids_on(node);
        for id in &ids {
            self.table
                .modify(id, |r| {
                    if let Some(p) = r.publications.get_mut(node) {
                        p.wanted = false;
                        p.node = NodeLevel::Absent;
                    }
                    Ok(())
                })
                .await?;
            self.work.queue.push(id);
        }
        tracing::warn!(%node, publications = ids.len(), "node forgotten: its node-side steps are skipped");
        Ok(ids.len() as u32)
    }

    /// Removes a node Berth no longer tracks anything on.
    pub async fn remove_node(&self, node: &str) -> Result<(), RequestError> {
        let directory = &self.nodes;
        if directory.node_record(node).is_none() {
            return Err(Missing::Node(node.to_string()).into());
        }
        if self.config.node(node).is_some() {
            return Err(RequestError::Invalid(format!(
                "node {node:?} is a [[node]] in berth.toml: remove it there"
            )));
        }
        let left = self.table.collect_keys(|r, out| {
            if r.publications().contains_key(node) {
                out.push(r.name().to_owned());
            }
        });
        if let Some(first) = left.first() {
            return Err(Conflict::NodeHolds {
                node: node.to_string(),
                count: left.len(),
                first: first.clone(),
            }
            .into());
        }
        self.table
            .store()
            .remove_node(node)
            .await
            .map_err(|e| Unready::store("the node's removal", e))?;
        directory.remove(node);
        tracing::info!(%node, "node removed");
        Ok(())
    }
}
