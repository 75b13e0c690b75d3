//! The requests a node's Docker makes (through its agent's `NodeVolumes`,
//! or `berth serve`'s own Docker socket), bounded to what that Docker may
//! touch: the rules of `berth_model`'s tenancy module, judged on the record
//! under the volume's lock so no request slips between a check and a write.
//! Each node's Docker works in one namespace (`docker_namespaces`, else
//! `default`): it sees, names and makes volumes there only.

use crate::Missing;
use berth_model::text::echo;
use berth_model::{DockerScope, Namespace, Origin, Publication, VolumeName, VolumeRecord, VolumeSpec};

use crate::RequestError;

/// Why a Docker request was refused (PERMISSION_DENIED on the wire).
#[derive(Debug, thiserror::Error)]
pub enum Denied {
    #[error(
        "node {0}'s Docker may use Berth's volumes but not create or remove them (docker_create_from in the server's berth.toml allows it)"
    )]
    NoCreate(String),
    #[error("{0} was not made through Docker: a Docker user removes only volumes Docker made")]
    NotDockers(String),
    #[error(
        "{volume} is published on {node} for {by}: a Docker user undoes only what its own node's Docker asked for"
    )]
    NotItsPublication {
        volume: String,
        node: String,
        by: String,
    },
    #[error(
        "secret {0} is not one a Docker user may name (docker_secrets in the server's berth.toml lists those)"
    )]
    Secret(String),
    #[error("a volume made through Docker starts empty: from_snapshot and from_volume are the API's")]
    Source,
    #[error("{name} is published on {on} (in use there): unmount it there first")]
    InUse { name: String, on: String },
    #[error("a volume named {0} exists and is not in this Docker's scope")]
    Taken(String),
}

/// No volume of that name that this Docker may see: the same answer as for
/// a volume that does not exist, so a Docker user learns nothing of others'.
fn unseen(name: &str, node: &str) -> RequestError {
    Missing::InDockerScope {
        volume: name.to_string(),
        node: node.to_string(),
    }
    .into()
}

crate::shared::view!(
    /// Requests bounded by a Docker scope: what a node's Docker may see and do.
    Docker,
    docker
);

impl Docker<'_> {
    /// Whether `node`'s Docker may create and remove volumes: an agent's node
    /// listed in `docker_create_from`, or the in-process node of `[docker]`
    /// with `create_volumes`.
    pub fn docker_may_create(&self, node: &str) -> bool {
        self.config.docker_create_from.allows(node)
            || self
                .config
                .docker
                .as_ref()
                .is_some_and(|d| d.node == node && d.create_volumes)
    }

    fn in_docker_scope(r: &VolumeRecord, node: &str) -> bool {
        r.docker.admits(&r.made_by, node)
    }

    /// The namespace `node`'s Docker works in (`docker_namespaces`).
    fn namespace_of(&self, node: &str) -> Namespace {
        self.config.docker_namespaces.of(node)
    }

    /// The volume, if `node`'s Docker may see it (in its namespace).
    pub fn docker_get(&self, node: &str, name: &str) -> Result<VolumeRecord, RequestError> {
        self.get(VolumeName::new(self.namespace_of(node), name))
            .filter(|r| Self::in_docker_scope(r, node))
            .ok_or_else(|| unseen(name, node))
    }

    /// The volumes `node`'s Docker may see (in its namespace).
    pub fn docker_list(&self, node: &str) -> Vec<VolumeRecord> {
        let namespace = self.namespace_of(node);
        // Only those it may see are copied, not every record first.
        let mut seen = self.table.collect(|r, out| {
            if r.spec.namespace == namespace && Self::in_docker_scope(r, node) {
                out.push(r.clone());
            }
        });
        seen.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        seen
    }

    /// Creates a volume for `node`'s Docker: made by it, in Docker's scope.
    pub async fn docker_create(&self, node: &str, spec: VolumeSpec) -> Result<VolumeRecord, RequestError> {
        if !self.docker_may_create(node) {
            return Err(Denied::NoCreate(node.into()).into());
        }
        if let Some(secret) = spec.secret.as_deref()
            && !self.config.docker_secrets.allows(secret)
        {
            return Err(Denied::Secret(echo(secret)).into());
        }
        if spec.source.is_some() {
            return Err(Denied::Source.into());
        }
        let name = spec.name.clone();
        let namespace = self.namespace_of(node);
        if self
            .get(VolumeName::new(namespace.clone(), &name))
            .is_some_and(|r| !Self::in_docker_scope(&r, node))
        {
            return Err(Denied::Taken(echo(&name)).into());
        }
        let r = self
            .requests_in(namespace)
            .create_as(spec, Origin::docker(node), DockerScope::ByOrigin)
            .await?;
        match Self::in_docker_scope(&r, node) {
            true => Ok(r),
            false => Err(Denied::Taken(echo(&name)).into()),
        }
    }

    /// Deletes a volume for `node`'s Docker: one made through Docker, in its
    /// scope, published nowhere.
    pub async fn docker_delete(&self, node: &str, name: &str) -> Result<VolumeRecord, RequestError> {
        if !self.docker_may_create(node) {
            return Err(Denied::NoCreate(node.into()).into());
        }
        self.docker_get(node, name)?;
        self.requests_in(self.namespace_of(node))
            .delete_checked(name, |r| {
                if !Self::in_docker_scope(r, node) {
                    return Err(unseen(name, node));
                }
                if !r.made_by.may_be_docker() {
                    return Err(Denied::NotDockers(echo(name)).into());
                }
                let on: Vec<&str> = r
                    .publications
                    .iter()
                    .filter(|(_, p)| p.wanted)
                    .map(|(n, _)| n.as_str())
                    .collect();
                match on.is_empty() {
                    true => Ok(()),
                    false => Err(Denied::InUse {
                        name: echo(name),
                        on: on.join(", "),
                    }
                    .into()),
                }
            })
            .await
    }

    /// Publishes a volume in its scope on `node`, for `node`'s Docker.
    pub async fn docker_publish(
        &self,
        node: &str,
        name: &str,
        readonly: bool,
    ) -> Result<VolumeRecord, RequestError> {
        self.requests_in(self.namespace_of(node))
            .publish_as(
                name,
                Some(node),
                readonly,
                Origin::docker(node),
                |r| match Self::in_docker_scope(r, node) {
                    true => Ok(()),
                    false => Err(unseen(name, node)),
                },
            )
            .await
    }

    /// Unpublishes a volume from `node` for `node`'s Docker: only a
    /// publication that Docker asked for there.
    pub async fn docker_unpublish(&self, node: &str, name: &str) -> Result<VolumeRecord, RequestError> {
        self.docker_get(node, name)?;
        let mine = |p: &Publication| match p.by.undoable_by_docker_of(node) {
            true => Ok(()),
            false => Err(Denied::NotItsPublication {
                volume: echo(name),
                node: node.into(),
                by: match &p.by {
                    Origin::Api => "an operator (the API)".into(),
                    other => other.to_string(),
                },
            }
            .into()),
        };
        self.requests_in(self.namespace_of(node))
            .unpublish_checked(name, node, mine)
            .await
    }

    /// Creates a volume for an operator (the API), in `docker`'s scope and
    /// the spec's namespace.
    pub async fn create_with_scope(
        &self,
        spec: VolumeSpec,
        docker: DockerScope,
    ) -> Result<VolumeRecord, RequestError> {
        self.requests_in(spec.namespace.clone())
            .create_as(spec, Origin::Api, docker)
            .await
    }

    /// Marks which nodes' Docker may see and publish a volume (the
    /// operator's word; the API's only).
    pub async fn set_docker_scope(
        &self,
        name: impl Into<VolumeName>,
        scope: DockerScope,
    ) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(&name.into())?;
        self.modify(&id, format!("Docker scope {scope}"), |r| {
            r.docker = scope;
            Ok(())
        })
        .await
    }
}
