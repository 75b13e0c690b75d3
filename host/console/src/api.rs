//! The console's calls of the API: each as the signed-in token, in the
//! namespace the page names, through the same service the TLS API's
//! callers reach (its entrance marks the call remote; the guard checks the
//! token, applies the ACLs and writes the audit log).

use std::convert::Infallible;

use berth_proto::berth::v1 as wire;
use berth_proto::berth::v1::berth_client::BerthClient;
use tonic::metadata::MetadataValue;

/// The API as a remote caller reaches it, in process.
pub type ApiService = tower::util::BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    Infallible,
>;

/// Why a call the console made did not answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The API refused or failed it: its message is for the person.
    #[error("{}", .0.message())]
    Refused(#[from] tonic::Status),
    /// A token or namespace that cannot be sent as metadata.
    #[error("{0} cannot be sent (it holds characters a header may not)")]
    Unsendable(&'static str),
}

impl CallError {
    /// Whether the API said who asks may not (or is not known).
    pub fn is_denied(&self) -> bool {
        matches!(self, CallError::Refused(s)
            if matches!(s.code(), tonic::Code::PermissionDenied | tonic::Code::Unauthenticated))
    }
}

#[derive(Clone)]
pub struct Api {
    service: ApiService,
}

impl Api {
    pub fn new(service: ApiService) -> Api {
        Api { service }
    }

    /// A client whose every call carries `token`, in `namespace`.
    fn client(&self, token: &str, namespace: &str) -> Result<Caller, CallError> {
        let bearer: MetadataValue<_> = format!("Bearer {token}")
            .parse()
            .map_err(|_| CallError::Unsendable("the token"))?;
        let namespace: MetadataValue<_> = namespace
            .parse()
            .map_err(|_| CallError::Unsendable("the namespace"))?;
        let mark: Mark = Box::new(move |mut request: tonic::Request<()>| {
            request.metadata_mut().insert("authorization", bearer.clone());
            request
                .metadata_mut()
                .insert("berth-namespace", namespace.clone());
            Ok(request)
        });
        Ok(BerthClient::with_interceptor(self.service.clone(), mark))
    }

    /// Who the token is and what it may do in `namespace`.
    pub async fn whoami(&self, token: &str, namespace: &str) -> Result<wire::AclToken, CallError> {
        let answer = self
            .client(token, namespace)?
            .acl_token_self(wire::AclTokenSelfRequest {})
            .await?;
        Ok(answer.into_inner())
    }

    pub async fn list(
        &self,
        token: &str,
        namespace: &str,
        request: wire::ListVolumesRequest,
    ) -> Result<wire::ListVolumesResponse, CallError> {
        Ok(self
            .client(token, namespace)?
            .list_volumes(request)
            .await?
            .into_inner())
    }

    pub async fn volume(&self, token: &str, namespace: &str, name: &str) -> Result<wire::Volume, CallError> {
        let request = wire::GetVolumeRequest { name: name.into() };
        Ok(self
            .client(token, namespace)?
            .get_volume(request)
            .await?
            .into_inner())
    }

    pub async fn nodes(&self, token: &str) -> Result<Vec<wire::Node>, CallError> {
        let request = wire::ListNodesRequest::default();
        let answer = self.client(token, "default")?.list_nodes(request).await?;
        Ok(answer.into_inner().nodes)
    }

    pub async fn plugins(&self, token: &str) -> Result<Vec<wire::PluginStatus>, CallError> {
        let request = wire::PluginStatusRequest {};
        let answer = self.client(token, "default")?.plugin_status(request).await?;
        Ok(answer.into_inner().plugins)
    }

    /// The snapshots of one volume.
    pub async fn snapshots(
        &self,
        token: &str,
        namespace: &str,
        volume: &str,
    ) -> Result<Vec<wire::Snapshot>, CallError> {
        let request = wire::ListSnapshotsRequest {
            volume: volume.into(),
        };
        let answer = self.client(token, namespace)?.list_snapshots(request).await?;
        Ok(answer.into_inner().snapshots)
    }

    pub async fn policy_set(&self, token: &str) -> Result<wire::PolicySet, CallError> {
        let request = wire::GetPolicySetRequest {};
        Ok(self
            .client(token, "default")?
            .get_policy_set(request)
            .await?
            .into_inner())
    }

    pub async fn policy_diff(&self, token: &str) -> Result<wire::PolicyDiffResponse, CallError> {
        let request = wire::PolicyDiffRequest {};
        Ok(self
            .client(token, "default")?
            .policy_diff(request)
            .await?
            .into_inner())
    }

    /// The audit log's latest `lines`, oldest first, as written (JSON lines).
    pub async fn audit(&self, token: &str, lines: u32) -> Result<Vec<String>, CallError> {
        let request = wire::TailAuditRequest { lines };
        Ok(self
            .client(token, "default")?
            .tail_audit(request)
            .await?
            .into_inner()
            .lines)
    }

    /// Does what a person asked for on a volume.
    pub async fn act(&self, token: &str, namespace: &str, action: Action) -> Result<(), CallError> {
        let mut client = self.client(token, namespace)?;
        match action {
            Action::Publish { name, node, readonly } => {
                client
                    .publish_volume(wire::PublishVolumeRequest { name, node, readonly })
                    .await?;
            }
            Action::Unpublish { name, node } => {
                client
                    .unpublish_volume(wire::UnpublishVolumeRequest { name, node })
                    .await?;
            }
            Action::Delete { name, force } => {
                client
                    .delete_volume(wire::DeleteVolumeRequest { name, force })
                    .await?;
            }
            Action::Retry { name } => {
                client.retry_volume(wire::RetryVolumeRequest { name }).await?;
            }
            Action::Expand { name, bytes } => {
                let required_bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
                client
                    .expand_volume(wire::ExpandVolumeRequest { name, required_bytes })
                    .await?;
            }
            Action::Snapshot { volume, name } => {
                client
                    .create_snapshot(wire::CreateSnapshotRequest { name, volume })
                    .await?;
            }
            Action::Create(spec) => {
                let request = wire::CreateVolumeRequest { spec: Some(*spec) };
                client.create_volume(request).await?;
            }
        }
        Ok(())
    }

    /// Drains a node (`undo`: takes it back into placement).
    pub async fn drain(&self, token: &str, node: &str, undo: bool) -> Result<(), CallError> {
        let request = wire::DrainNodeRequest {
            name: node.into(),
            undo,
        };
        self.client(token, "default")?.drain_node(request).await?;
        Ok(())
    }

    /// Returns to policy set `version` (0: the one before).
    pub async fn rollback(&self, token: &str, version: u64) -> Result<wire::PolicySet, CallError> {
        let request = wire::RollbackPolicyRequest { version };
        Ok(self
            .client(token, "default")?
            .rollback_policy(request)
            .await?
            .into_inner())
    }
}

/// Marks a call with its token and namespace.
type Mark = Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send + Sync>;
type Caller = BerthClient<tonic::service::interceptor::InterceptedService<ApiService, Mark>>;

/// What a person may do to a volume from the console.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// An empty node: placement chooses.
    Publish {
        name: String,
        node: String,
        readonly: bool,
    },
    Unpublish {
        name: String,
        node: String,
    },
    /// `force`: unpublish everywhere first.
    Delete {
        name: String,
        force: bool,
    },
    Retry {
        name: String,
    },
    /// To `bytes` (a volume only grows).
    Expand {
        name: String,
        bytes: usize,
    },
    /// A snapshot `name` of `volume`.
    Snapshot {
        volume: String,
        name: String,
    },
    Create(Box<wire::VolumeSpec>),
}
