//! Who may make which call: the one table from each call of `berth.v1`
//! to what it needs of its caller, what it names (for the audit log) and
//! whether it changes anything; and the [`Guard`] every call passes before
//! the API answers it.
//!
//! The caller is told by the entrance the call came in by: the API socket
//! (and a server's own socket, passed on by a follower) is the management
//! identity; the TLS API marks its calls `berth-caller: remote`, and those
//! must bring an ACL token (`authorization: Bearer ...`) or come on a
//! connection whose client certificate (of `api_client_ca`) has a subject
//! bound to policies, which the entrance marks `berth-subject`. An entrance
//! drops whatever `berth-caller` and `berth-subject` a client sent, so no
//! caller can claim another's; a token, when sent, is who calls.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use prost::Message;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;

use crate::acl::{Area, Caller, Level, Needs, VolumeCap};
use berth_model::namespace::{EVERY_NAMESPACE, NAMESPACE_HEADER};
use berth_proto::berth::v1::berth_server::BerthServer;

use super::BerthApi;
use super::audit::Entry;

/// The metadata an entrance marks its calls with.
pub const CALLER_HEADER: &str = "berth-caller";
/// Set by the TLS API's entrance only: the verified client certificate's
/// subject (followers pass it on to the leader with the call).
pub const SUBJECT_HEADER: &str = "berth-subject";
/// Its value for a call of the TLS API.
pub const REMOTE: &str = "remote";
/// The largest call the guard reads (tonic's own limit for a message).
const MAX_CALL: usize = 4 << 20;

/// What a call names, where its request has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Field 1, a string: a volume, snapshot, node, policy or accessor.
    Name,
    /// Field 1 a message whose field 1 is the name (a spec, a policy).
    Nested,
    None,
}

macro_rules! calls {
    ($($call:ident => $needs:expr, $target:ident, $changes:literal;)*) => {
        /// A call of the `berth.v1.Berth` service.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Call { $($call,)* }

        impl Call {
            pub const ALL: &'static [Call] = &[$(Call::$call,)*];

            /// The call a request's path names (`/berth.v1.Berth/CreateVolume`).
            pub fn from_path(path: &str) -> Option<Call> {
                match path.strip_prefix("/berth.v1.Berth/")? {
                    $(stringify!($call) => Some(Call::$call),)*
                    _ => None,
                }
            }

            pub fn name(self) -> &'static str {
                match self { $(Call::$call => stringify!($call),)* }
            }

            /// What its caller must be allowed.
            pub fn needs(self) -> Needs {
                match self { $(Call::$call => $needs,)* }
            }

            pub fn target(self) -> Target {
                match self { $(Call::$call => Target::$target,)* }
            }

            /// Whether it changes anything (each is in the audit log).
            pub fn changes(self) -> bool {
                match self { $(Call::$call => $changes,)* }
            }
        }
    };
}

const LIST: Needs = Needs::Volumes(VolumeCap::List);
const READ: Needs = Needs::Volumes(VolumeCap::Read);
const WRITE: Needs = Needs::Volumes(VolumeCap::Write);
const MOUNT: Needs = Needs::Volumes(VolumeCap::Mount);
const fn area(area: Area, level: Level) -> Needs {
    Needs::Area(area, level)
}
use Area::{Node, Operator, Plugin, Policy};
use Level::{Read, Write};

calls! {
    CreateVolume => WRITE, Nested, true;
    GetVolume => READ, Name, false;
    ListVolumes => LIST, None, false;
    DeleteVolume => WRITE, Name, true;
    PublishVolume => MOUNT, Name, true;
    UnpublishVolume => MOUNT, Name, true;
    RetryVolume => WRITE, Name, true;
    ExpandVolume => WRITE, Name, true;
    ModifyVolume => WRITE, Name, true;
    ImportVolume => WRITE, Nested, true;
    ForgetVolume => WRITE, Name, true;
    SetDockerScope => WRITE, Name, true;
    VolumeHealth => READ, Name, false;
    CreateSnapshot => WRITE, Name, true;
    DeleteSnapshot => WRITE, Name, true;
    GetSnapshot => READ, Name, false;
    ListSnapshots => LIST, None, false;
    CreateGroupSnapshot => WRITE, Name, true;
    DeleteGroupSnapshot => WRITE, Name, true;
    GetGroupSnapshot => READ, Name, false;
    ListGroupSnapshots => LIST, None, false;
    ListNodes => area(Node, Read), None, false;
    DrainNode => area(Node, Write), Name, true;
    ForgetNode => area(Node, Write), Name, true;
    RemoveNode => area(Node, Write), Name, true;
    CreateJoinToken => area(Node, Write), None, true;
    ListJoinTokens => area(Node, Write), None, false;
    RevokeJoinToken => area(Node, Write), Name, true;
    PluginStatus => area(Plugin, Read), None, false;
    PluginOrphans => area(Plugin, Read), Name, false;
    RecordPluginCheck => area(Plugin, Write), Nested, true;
    Summary => area(Operator, Read), None, false;
    ReloadPolicies => area(Policy, Write), None, true;
    ApplyPolicySet => area(Policy, Write), None, true;
    GetPolicySet => area(Policy, Read), None, false;
    ListDecisions => area(Policy, Read), None, false;
    PolicyDiff => area(Policy, Read), None, false;
    PromotePolicy => area(Policy, Write), None, true;
    RollbackPolicy => area(Policy, Write), None, true;
    BootstrapAcl => area(Operator, Write), None, true;
    ApplyAclPolicy => area(Operator, Write), Nested, true;
    GetAclPolicy => area(Operator, Read), Name, false;
    ListAclPolicies => area(Operator, Read), None, false;
    DeleteAclPolicy => area(Operator, Write), Name, true;
    CreateAclToken => area(Operator, Write), Name, true;
    ListAclTokens => area(Operator, Read), None, false;
    RevokeAclToken => area(Operator, Write), Name, true;
    AclTokenSelf => Needs::Caller, None, false;
    BindAclCertificate => area(Operator, Write), Name, true;
    UnbindAclCertificate => area(Operator, Write), Name, true;
    ListAclCertificates => area(Operator, Read), None, false;
    SetNamespaceQuota => area(Operator, Write), Name, true;
    ListNamespaces => LIST, None, false;
    TailAudit => area(Operator, Read), None, false;
}

#[derive(Clone, PartialEq, Message)]
struct Named {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, Message)]
struct Nested {
    #[prost(message, optional, tag = "1")]
    inner: Option<Named>,
}

/// The name a call's request carries (its gRPC frame: a flag byte, a
/// length, the message), or nothing for one that does not read.
fn target_of(call: Call, frame: &[u8]) -> String {
    let Some(message) = frame.get(5..) else {
        return String::new();
    };
    let name = match call.target() {
        Target::Name => Named::decode(message).map(|n| n.name).ok(),
        Target::Nested => Nested::decode(message).ok().and_then(|n| n.inner).map(|n| n.name),
        Target::None => None,
    };
    // Bounded and printable, as everything from outside.
    name.filter(|n| n.len() <= 512 && !n.chars().any(char::is_control))
        .unwrap_or_default()
}

/// The caller the entrance's mark and the token (or, without one, the
/// client certificate's subject) say.
fn caller(api: &BerthApi, headers: &http::HeaderMap) -> Result<Caller, crate::acl::Unauthenticated> {
    if !headers.contains_key(CALLER_HEADER) {
        return Ok(Caller::Management);
    }
    let token = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).trim());
    let subject = headers.get(SUBJECT_HEADER).and_then(|v| v.to_str().ok());
    match (token, subject) {
        (None, Some(subject)) => api.acl.authenticate_certificate(subject),
        (token, _) => api.acl.authenticate(token),
    }
}

/// A `grpc-message` as sent (percent-encoded), as text, bounded.
fn percent_decoded(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len().min(1024));
    let mut i = 0;
    while i < raw.len() && out.len() < 1024 {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out)
        .chars()
        .filter(|c| !c.is_control())
        .collect()
}

/// Who may do what, and where it is recorded.
pub struct Access {
    pub acl: Arc<crate::acl::Acl>,
    pub audit: Arc<super::audit::Audit>,
}

impl BerthApi {
    /// The API behind its guard: what every entrance serves.
    pub fn guarded(self: &Arc<Self>) -> Guard {
        Guard::new(
            self.clone(),
            berth_proto::berth::v1::berth_server::BerthServer::from_arc(self.clone()),
        )
    }
}

/// The API behind the check: every call is let through only if its caller
/// may make it, and is written to the audit log if it changed something
/// or was refused for who asked.
#[derive(Clone)]
pub struct Guard {
    api: Arc<BerthApi>,
    inner: BerthServer<BerthApi>,
}

impl Guard {
    pub fn new(api: Arc<BerthApi>, inner: BerthServer<BerthApi>) -> Guard {
        Guard { api, inner }
    }

    async fn answer<B>(self, request: http::Request<B>) -> http::Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        use tower::ServiceExt;
        let Some(call) = Call::from_path(request.uri().path()) else {
            let path = request.uri().path();
            return tonic::Status::unimplemented(format!("no call {path:?} in berth.v1")).into_http();
        };
        let (mut parts, body) = request.into_parts();
        let frame = match Limited::new(body, MAX_CALL).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return tonic::Status::resource_exhausted(format!("a call of at most {MAX_CALL} bytes"))
                    .into_http();
            }
        };
        let namespace = parts
            .headers
            .get(NAMESPACE_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(berth_model::Namespace::DEFAULT)
            .to_string();
        let target = target_of(call, &frame);
        let entry = |identity: &str, code: tonic::Code, message: &str| {
            self.api.audit.record(&Entry {
                at_ms: berth_model::clock::now_ms(),
                identity,
                call: call.name(),
                namespace: &namespace,
                target: &target,
                code,
                message,
            });
        };
        let caller = match caller(&self.api, &parts.headers) {
            Ok(caller) => caller,
            Err(e) => {
                let message = e.to_string();
                entry("unknown", tonic::Code::Unauthenticated, &message);
                return tonic::Status::unauthenticated(message).into_http();
            }
        };
        // Acting as a node's Docker is for the server's own Docker plugin,
        // on the socket: a token holder may not take a Docker's place.
        if caller != Caller::Management && parts.headers.contains_key(berth_model::DOCKER_NODE_HEADER) {
            let message = format!(
                "{caller} may not call as a node's Docker (the {} metadata is for the server's own Docker plugin)",
                berth_model::DOCKER_NODE_HEADER
            );
            entry(&caller.identity(), tonic::Code::PermissionDenied, &message);
            return tonic::Status::permission_denied(message).into_http();
        }
        // Every namespace at once: the list shows those the caller may list.
        let every = namespace == EVERY_NAMESPACE && call.needs() == Needs::Volumes(VolumeCap::List);
        if !every && let Err(denied) = self.api.acl.check(&caller, call.needs(), &namespace) {
            let message = denied.to_string();
            entry(&caller.identity(), tonic::Code::PermissionDenied, &message);
            return tonic::Status::permission_denied(message).into_http();
        }
        let identity = caller.identity();
        let asker = berth_manager::admission::Asker {
            identity: identity.clone(),
            policies: self.api.acl.policies_of(&caller),
        };
        parts.extensions.insert(caller);
        let request = http::Request::from_parts(parts, Full::new(frame));
        let answered = berth_manager::admission::asked_by(asker, self.inner.oneshot(request));
        let Ok(response) = answered.await;
        if call.changes() {
            // An error is answered in the headers; OK only in the trailers.
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i32>().ok())
                .map_or(tonic::Code::Ok, tonic::Code::from_i32);
            // A refusal's words (an admission policy's reason, say) go with it.
            let message = match code {
                tonic::Code::Ok => String::new(),
                _ => response
                    .headers()
                    .get("grpc-message")
                    .map(|v| percent_decoded(v.as_bytes()))
                    .unwrap_or_default(),
            };
            entry(&identity, code, &message);
        }
        response
    }
}

impl NamedService for Guard {
    const NAME: &'static str = berth_proto::berth::v1::berth_server::SERVICE_NAME;
}

impl<B> tower::Service<http::Request<B>> for Guard
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.answer(request).await) })
    }
}

/// How an entrance marks a call before the guard sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entrance {
    /// The API socket: its user is the management identity.
    Local,
    /// The TLS API: the caller brings a token, or a client certificate.
    Remote,
}

/// The subject's common name of the client certificate a TLS connection's
/// handshake verified (against `api_client_ca`), on each of its calls.
#[derive(Clone, Debug)]
pub struct PeerSubject(Arc<str>);

impl PeerSubject {
    /// The subject of a verified chain's first certificate, if it can name
    /// a caller (see [`crate::acl::valid_subject`]).
    pub fn of(chain: &[rustls::pki_types::CertificateDer<'_>]) -> Option<PeerSubject> {
        let name = crate::cluster::pki::common_name(chain.first()?)?;
        crate::acl::valid_subject(&name).then(|| PeerSubject(name.into()))
    }
}

impl Entrance {
    /// Drops whatever marks the client sent and sets this entrance's own:
    /// for the TLS API, `berth-caller` and the certificate's subject.
    pub fn mark<B>(self, request: &mut http::Request<B>) {
        let subject = request.extensions().get::<PeerSubject>().cloned();
        let headers = request.headers_mut();
        headers.remove(CALLER_HEADER);
        headers.remove(SUBJECT_HEADER);
        if self == Entrance::Remote {
            headers.insert(CALLER_HEADER, http::HeaderValue::from_static(REMOTE));
            if let Some(value) = subject.and_then(|s| http::HeaderValue::from_str(&s.0).ok()) {
                headers.insert(SUBJECT_HEADER, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every call of the service has its line, and no line names a call
    /// the service does not have.
    #[test]
    fn the_table_has_every_call_of_the_service() {
        let proto = include_str!("../../../../proto/berth/v1/berth.proto");
        let service = &proto[proto.find("service Berth {").unwrap()..];
        let service = &service[..service.find("\n}").unwrap()];
        let mut rpcs: Vec<&str> = service
            .split("rpc ")
            .skip(1)
            .map(|r| r.split('(').next().unwrap().trim())
            .collect();
        let mut table: Vec<&str> = Call::ALL.iter().map(|c| c.name()).collect();
        rpcs.sort();
        table.sort();
        assert_eq!(rpcs, table);
        for call in Call::ALL {
            assert_eq!(
                Call::from_path(&format!("/berth.v1.Berth/{}", call.name())),
                Some(*call)
            );
        }
    }

    /// The API reference says what each call needs, as this table does.
    #[test]
    fn the_api_reference_lists_what_each_call_needs() {
        let page = include_str!("../../../../docs/src/reference/api.md");
        for call in Call::ALL {
            let needs = match call.needs() {
                Needs::Volumes(cap) => format!("`{}` in the namespace", cap.as_str()),
                Needs::Area(area, level) => format!("`{}` {}", area.as_str(), level.as_str()),
                Needs::Caller => "a valid token".to_string(),
            };
            let row = format!("| `{}` | {needs} |", call.name());
            assert!(
                page.contains(&row),
                "docs/src/reference/api.md lacks the row {row}"
            );
        }
    }

    #[test]
    fn the_audit_reads_the_name_a_call_carries() {
        use berth_proto::berth::v1 as api;
        let framed = |m: &dyn Fn(&mut Vec<u8>)| {
            let mut body = vec![0u8; 5];
            m(&mut body);
            body
        };
        let delete = framed(&|b| {
            api::DeleteVolumeRequest {
                name: "data".into(),
                force: true,
            }
            .encode(b)
            .unwrap()
        });
        assert_eq!(target_of(Call::DeleteVolume, &delete), "data");
        let create = framed(&|b| {
            api::CreateVolumeRequest {
                spec: Some(api::VolumeSpec {
                    name: "logs".into(),
                    plugin: "hostpath".into(),
                    ..Default::default()
                }),
            }
            .encode(b)
            .unwrap()
        });
        assert_eq!(target_of(Call::CreateVolume, &create), "logs");
        assert_eq!(target_of(Call::ListVolumes, &create), "");
        assert_eq!(
            target_of(Call::DeleteVolume, &[0, 0, 0, 0, 9, 0x0a, 0x02, 0xff, 0xfe]),
            ""
        );
    }
}
