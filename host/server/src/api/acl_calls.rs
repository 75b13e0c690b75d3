//! The ACL calls of the API: bootstrap, policies, tokens and certificate
//! subjects. The guard has
//! checked the caller's `operator` level already (a token asking about
//! itself needs only to be valid).

use std::time::Duration;

use crate::acl::{AclError, Caller};
use berth_proto::berth::v1 as api;
use berth_store::{AclCertificateRecord, AclPolicyRecord, AclTokenRecord};
use tonic::{Request, Response, Status};

use super::BerthApi;

fn status(e: AclError) -> Status {
    let message = e.to_string();
    match e {
        AclError::Rules { .. }
        | AclError::Name(_)
        | AclError::Description
        | AclError::NoGrant
        | AclError::Subject(_) => Status::invalid_argument(message),
        AclError::NoPolicy(_) | AclError::NoToken(_) | AclError::NoCertificate(_) => {
            Status::not_found(message)
        }
        AclError::Bootstrapped => Status::failed_precondition(message),
        AclError::TooMany { .. } => Status::resource_exhausted(message),
        AclError::Store(_) => Status::unavailable(message),
    }
}

fn policy_to_api(p: AclPolicyRecord) -> api::AclPolicy {
    api::AclPolicy {
        name: p.name,
        description: p.description,
        rules: p.rules,
        modified_ms: p.modified_ms,
    }
}

fn token_to_api(t: AclTokenRecord) -> api::AclToken {
    api::AclToken {
        accessor: t.accessor,
        name: t.name,
        policies: t.policies,
        management: t.management,
        created_ms: t.created_ms,
        expires_ms: t.expires_ms.unwrap_or(0),
        may: Vec::new(),
    }
}

/// What `caller` may do in `namespace`: its volume capabilities there,
/// then its levels beyond namespaces (`node:write`), as `AclToken.may` says.
fn may(server: &BerthApi, caller: &Caller, namespace: &str) -> Vec<String> {
    use crate::acl::{Area, Level, Needs, VolumeCap};
    let mut may: Vec<String> = VolumeCap::ALL
        .into_iter()
        .filter(|cap| server.acl.allows(caller, Needs::Volumes(*cap), namespace))
        .map(|cap| cap.as_str().to_string())
        .collect();
    for area in [Area::Node, Area::Plugin, Area::Policy, Area::Operator] {
        if let Some(level) = [Level::Write, Level::Read]
            .into_iter()
            .find(|level| server.acl.allows(caller, Needs::Area(area, *level), namespace))
        {
            may.push(format!("{}:{}", area.as_str(), level.as_str()));
        }
    }
    may
}

fn minted((token, secret): (AclTokenRecord, String)) -> Response<api::AclTokenSecret> {
    Response::new(api::AclTokenSecret {
        token: Some(token_to_api(token)),
        secret,
    })
}

pub(super) async fn bootstrap(server: &BerthApi) -> Result<Response<api::AclTokenSecret>, Status> {
    server.acl.bootstrap().await.map(minted).map_err(status)
}

pub(super) async fn apply_policy(
    server: &BerthApi,
    req: Request<api::ApplyAclPolicyRequest>,
) -> Result<Response<api::AclPolicy>, Status> {
    let p = req
        .into_inner()
        .policy
        .ok_or_else(|| Status::invalid_argument("policy: required"))?;
    let applied = server
        .acl
        .apply_policy(p.name, p.description, p.rules)
        .await
        .map_err(status)?;
    Ok(Response::new(policy_to_api(applied)))
}

pub(super) fn get_policy(server: &BerthApi, name: &str) -> Result<Response<api::AclPolicy>, Status> {
    let p = server
        .acl
        .policy(name)
        .ok_or_else(|| status(AclError::NoPolicy(name.to_string())))?;
    Ok(Response::new(policy_to_api(p)))
}

pub(super) fn list_policies(server: &BerthApi) -> Response<api::ListAclPoliciesResponse> {
    Response::new(api::ListAclPoliciesResponse {
        policies: server.acl.policies().into_iter().map(policy_to_api).collect(),
    })
}

pub(super) async fn delete_policy(server: &BerthApi, name: &str) -> Result<Response<api::AclPolicy>, Status> {
    let p = server.acl.delete_policy(name).await.map_err(status)?;
    Ok(Response::new(policy_to_api(p)))
}

pub(super) async fn create_token(
    server: &BerthApi,
    req: Request<api::CreateAclTokenRequest>,
) -> Result<Response<api::AclTokenSecret>, Status> {
    let r = req.into_inner();
    let ttl = (r.ttl_seconds > 0).then(|| Duration::from_secs(r.ttl_seconds));
    server
        .acl
        .create_token(r.name, r.policies, r.management, ttl)
        .await
        .map(minted)
        .map_err(status)
}

pub(super) fn list_tokens(server: &BerthApi) -> Response<api::ListAclTokensResponse> {
    Response::new(api::ListAclTokensResponse {
        tokens: server.acl.tokens().into_iter().map(token_to_api).collect(),
    })
}

pub(super) async fn revoke_token(
    server: &BerthApi,
    accessor: &str,
) -> Result<Response<api::AclToken>, Status> {
    let t = server.acl.revoke(accessor).await.map_err(status)?;
    Ok(Response::new(token_to_api(t)))
}

pub(super) fn token_self<T>(server: &BerthApi, req: &Request<T>) -> Result<Response<api::AclToken>, Status> {
    let namespace = super::scope::namespace(req).map_err(super::codes::status)?;
    match req.extensions().get::<Caller>() {
        Some(caller @ Caller::Token { accessor, .. }) => {
            let t = server
                .acl
                .token(accessor)
                .ok_or_else(|| status(AclError::NoToken(accessor.clone())))?;
            let mut answer = token_to_api(t);
            answer.may = may(server, caller, namespace.as_str());
            Ok(Response::new(answer))
        }
        Some(Caller::Certificate { subject }) => Err(Status::not_found(format!(
            "you call as certificate subject {subject:?}, not with a token (`berth acl certificate list` shows its policies)"
        ))),
        _ => Err(Status::not_found(
            "the management identity (the API socket's user) has no token",
        )),
    }
}

fn certificate_to_api(c: AclCertificateRecord) -> api::AclCertificate {
    api::AclCertificate {
        subject: c.subject,
        policies: c.policies,
        modified_ms: c.modified_ms,
    }
}

pub(super) async fn bind_certificate(
    server: &BerthApi,
    req: Request<api::BindAclCertificateRequest>,
) -> Result<Response<api::AclCertificate>, Status> {
    let r = req.into_inner();
    let bound = server
        .acl
        .bind_certificate(r.subject, r.policies)
        .await
        .map_err(status)?;
    Ok(Response::new(certificate_to_api(bound)))
}

pub(super) async fn unbind_certificate(
    server: &BerthApi,
    subject: &str,
) -> Result<Response<api::AclCertificate>, Status> {
    let c = server.acl.unbind_certificate(subject).await.map_err(status)?;
    Ok(Response::new(certificate_to_api(c)))
}

pub(super) fn list_certificates(server: &BerthApi) -> Response<api::ListAclCertificatesResponse> {
    Response::new(api::ListAclCertificatesResponse {
        certificates: server
            .acl
            .certificates()
            .into_iter()
            .map(certificate_to_api)
            .collect(),
    })
}

pub(super) fn tail_audit(server: &BerthApi, lines: u32) -> Result<Response<api::TailAuditResponse>, Status> {
    let lines = match lines {
        0 => 20,
        n => n as usize,
    };
    let lines = server
        .audit
        .tail(lines)
        .map_err(|e| Status::unavailable(format!("reading the audit log: {e}")))?;
    Ok(Response::new(api::TailAuditResponse { lines }))
}
