//! A registry client for modules: push and pull one WebAssembly artifact by
//! the distribution API, answering the registry's challenge (basic, or a
//! bearer token from its realm) with the Docker config's credentials.

use std::path::PathBuf;
use std::sync::Mutex;

use bytes::Bytes;
use serde::Deserialize;

use crate::artifact::{self, Component, DOCUMENT_MAX, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE};
use crate::auth::{self, Credentials};
use crate::http::{Response, Target, Transport, loopback};
use crate::{Digest, MODULE_MAX, OciError, Reference};

/// How to reach registries: trust, transport, credentials.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// A PEM file of the CA(s) to trust for HTTPS; the system's when unset.
    pub ca: Option<PathBuf>,
    /// Plain HTTP (to a registry on loopback only): `Some(true)` at once,
    /// `Some(false)` never; `None` tries a loopback registry over HTTPS
    /// first, then plain HTTP if it does not speak TLS.
    pub plain_http: Option<bool>,
    /// The Docker config file with the credentials; the default place when unset.
    pub docker_config: Option<PathBuf>,
}

/// A module fetched and checked: every byte matches its digest.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The reference, pinned to the manifest's digest.
    pub reference: Reference,
    pub manifest: Bytes,
    pub config: Bytes,
    pub module: Bytes,
    pub layer: Digest,
}

pub struct Registry {
    pub(crate) name: String,
    transport: Transport,
    credentials: Option<Credentials>,
    /// The Docker credential helper the config names for this registry
    /// when it holds no credentials of its own for it (Berth runs none).
    pub(crate) helper: Option<String>,
    /// The last bearer token the registry's realm gave.
    token: Mutex<Option<String>>,
    /// When the operation this client was made for must be done by.
    deadline: tokio::time::Instant,
}

#[derive(Deserialize)]
struct Token {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

/// What a request is, for the messages and the limits.
/// How many redirects a read follows.
const MAX_REDIRECTS: usize = 5;

pub(crate) struct Call<'a> {
    pub method: &'a str,
    pub target: Target,
    pub headers: Vec<(&'a str, String)>,
    pub body: Bytes,
    pub limit: usize,
    pub what: String,
}

impl Registry {
    pub fn new(reference: &Reference, access: &Access) -> Result<Registry, OciError> {
        let transport = if access.plain_http == Some(true) {
            if !loopback(reference.host()) {
                return Err(OciError::PlainHttp(reference.registry.clone()));
            }
            Transport::Plain
        } else if access.plain_http.is_none() && loopback(reference.host()) && access.ca.is_none() {
            Transport::loopback(None)?
        } else {
            Transport::https(access.ca.as_deref())?
        };
        let config = access.docker_config.clone().or_else(auth::docker_config_path);
        let credentials = match &config {
            Some(path) => auth::credentials_for(path, &reference.registry)?,
            None => None,
        };
        let helper = match (&config, &credentials) {
            (Some(path), None) => auth::helper_for(path, &reference.registry),
            _ => None,
        };
        Ok(Registry {
            name: reference.registry.clone(),
            transport,
            credentials,
            helper,
            token: Mutex::new(None),
            deadline: tokio::time::Instant::now() + crate::http::OPERATION_TIMEOUT,
        })
    }

    pub(crate) fn target(&self, path: String) -> Target {
        Target {
            authority: self.name.clone(),
            path,
        }
    }

    /// Fetches the module `reference` names and checks each piece against
    /// its digest; a module larger than `max` bytes is refused unread.
    pub async fn pull(&self, reference: &Reference, max: usize) -> Result<Pulled, OciError> {
        let repo = &reference.repository;
        let Some(wanted) = reference.manifest_ref() else {
            return Err(OciError::Reference(
                reference.to_string(),
                "name a tag or a digest",
            ));
        };
        let at = reference.to_string();
        let response = self
            .call(Call {
                method: "GET",
                target: self.target(format!("/v2/{repo}/manifests/{wanted}")),
                headers: vec![("Accept", MANIFEST_MEDIA_TYPE.to_string())],
                body: Bytes::new(),
                limit: DOCUMENT_MAX,
                what: format!("the manifest of {at}"),
            })
            .await?;
        let manifest = response.body;
        let digest = match &reference.digest {
            Some(d) => {
                d.check("the manifest", &at, &manifest)?;
                d.clone()
            }
            None => {
                let d = Digest::of(&manifest);
                // A tag resolves to what the bytes are, whatever a header claims.
                if let Some(claimed) = response
                    .headers
                    .get("docker-content-digest")
                    .and_then(|v| v.to_str().ok())
                    && claimed != d.as_str()
                {
                    return Err(OciError::DigestMismatch {
                        what: "the manifest",
                        at,
                        expected: claimed.to_string(),
                        actual: d.to_string(),
                    });
                }
                d
            }
        };
        let (layer, size) = artifact::module_layer(&at, &manifest)?;
        if size > max.min(MODULE_MAX) as u64 {
            return Err(OciError::TooLarge {
                registry: self.name.clone(),
                what: format!("module {at} ({size} bytes)"),
                max: max.min(MODULE_MAX),
            });
        }
        let (config_digest, _) = artifact::config_of(&manifest).ok_or_else(|| OciError::Artifact {
            at: at.clone(),
            why: "its config has no digest".into(),
        })?;
        let config = self
            .blob(repo, &config_digest, DOCUMENT_MAX, "the config", &at)
            .await?;
        let module = self.blob(repo, &layer, size as usize, "the module", &at).await?;
        if !module.starts_with(b"\0asm") {
            return Err(OciError::Artifact {
                at,
                why: "its layer is not a WebAssembly component (no \\0asm header)".into(),
            });
        }
        Ok(Pulled {
            reference: reference.pinned(digest),
            manifest,
            config,
            module,
            layer,
        })
    }

    /// One blob, checked against its digest.
    pub(crate) async fn blob(
        &self,
        repo: &str,
        digest: &Digest,
        limit: usize,
        what: &'static str,
        at: &str,
    ) -> Result<Bytes, OciError> {
        let body = self
            .call(Call {
                method: "GET",
                target: self.target(format!("/v2/{repo}/blobs/{digest}")),
                headers: vec![],
                body: Bytes::new(),
                limit,
                what: format!("{what} of {at}"),
            })
            .await?
            .body;
        digest.check(what, at, &body)?;
        Ok(body)
    }

    /// Publishes `module` as the artifact at `reference` (under its tag, or
    /// by digest alone); returns the reference pinned to the manifest's digest.
    pub async fn push(
        &self,
        reference: &Reference,
        module: Bytes,
        component: Component,
        title: Option<&str>,
    ) -> Result<Reference, OciError> {
        let (config, manifest) = artifact::pack(&module, component, title);
        let repo = &reference.repository;
        self.upload(repo, Bytes::from(config)).await?;
        self.upload(repo, module).await?;
        let digest = Digest::of(&manifest);
        let tag = reference.tag.clone().unwrap_or_else(|| digest.to_string());
        self.call(Call {
            method: "PUT",
            target: self.target(format!("/v2/{repo}/manifests/{tag}")),
            headers: vec![("Content-Type", MANIFEST_MEDIA_TYPE.to_string())],
            body: Bytes::from(manifest),
            limit: DOCUMENT_MAX,
            what: format!("storing the manifest of {reference}"),
        })
        .await?;
        Ok(reference.pinned(digest))
    }

    /// The digest `reference` names: its own, or the tag's manifest's.
    pub async fn resolve(&self, reference: &Reference) -> Result<Digest, OciError> {
        if let Some(d) = &reference.digest {
            return Ok(d.clone());
        }
        let Some(tag) = &reference.tag else {
            return Err(OciError::Reference(
                reference.to_string(),
                "name a tag or a digest",
            ));
        };
        let body = self
            .call(Call {
                method: "GET",
                target: self.target(format!("/v2/{}/manifests/{tag}", reference.repository)),
                headers: vec![("Accept", MANIFEST_MEDIA_TYPE.to_string())],
                body: Bytes::new(),
                limit: DOCUMENT_MAX,
                what: format!("the manifest of {reference}"),
            })
            .await?
            .body;
        Ok(Digest::of(&body))
    }

    /// Uploads a blob in one request, unless the registry has it already.
    pub(crate) async fn upload(&self, repo: &str, blob: Bytes) -> Result<(), OciError> {
        let digest = Digest::of(&blob);
        let head = self
            .call_any(Call {
                method: "HEAD",
                target: self.target(format!("/v2/{repo}/blobs/{digest}")),
                headers: vec![],
                body: Bytes::new(),
                limit: DOCUMENT_MAX,
                what: format!("looking for blob {digest}"),
            })
            .await?;
        if head.status == 200 {
            return Ok(());
        }
        let started = self
            .call(Call {
                method: "POST",
                target: self.target(format!("/v2/{repo}/blobs/uploads/")),
                headers: vec![],
                body: Bytes::new(),
                limit: DOCUMENT_MAX,
                what: format!("starting the upload of {digest}"),
            })
            .await?;
        let location = started.header("location").ok_or_else(|| OciError::Http {
            registry: self.name.clone(),
            why: "an upload started without a Location".into(),
        })?;
        let mut target = Target::resolve(&self.target(String::new()), location, self.transport.is_https())
            .ok_or_else(|| OciError::Http {
                registry: self.name.clone(),
                why: format!("an upload location {location:?} this client does not follow"),
            })?;
        let sep = if target.path.contains('?') { '&' } else { '?' };
        target.path = format!("{}{sep}digest={digest}", target.path);
        let kind = if blob.starts_with(b"\0asm") {
            LAYER_MEDIA_TYPE
        } else {
            "application/octet-stream"
        };
        self.call(Call {
            method: "PUT",
            target,
            headers: vec![("Content-Type", kind.to_string())],
            body: blob,
            limit: DOCUMENT_MAX,
            what: format!("uploading {digest}"),
        })
        .await?;
        Ok(())
    }

    /// A call that must succeed (2xx), authenticating when challenged.
    pub(crate) async fn call(&self, call: Call<'_>) -> Result<Response, OciError> {
        let what = call.what.clone();
        let (method, headers, limit) = (call.method, call.headers.clone(), call.limit);
        let mut at = call.target.clone();
        let mut response = self.call_any(call).await?;
        // Registries hand blobs to a CDN or object store by redirect (Docker Hub,
        // GHCR, anything on S3); only reads follow, and the digest check after
        // is what makes the other host trustworthy.
        let mut hops = 0;
        while method == "GET" && matches!(response.status, 301 | 302 | 303 | 307 | 308) {
            hops += 1;
            let location = response.header("location").unwrap_or_default();
            let next = Target::resolve(&at, location, self.transport.is_https())
                .filter(|_| hops <= MAX_REDIRECTS)
                .ok_or_else(|| OciError::Http {
                    registry: self.name.clone(),
                    why: format!(
                        "{what}: a redirect to {location:?} this client does not follow (at most {MAX_REDIRECTS}, never from HTTPS to HTTP)"
                    ),
                })?;
            let mut headers = headers.clone();
            // The registry's credentials are for the registry, not for wherever it points.
            if self.is_own(&next)
                && let Some(a) = self.authorization()
            {
                headers.push(("Authorization", a));
            }
            response = self
                .transport
                .send(
                    &self.name,
                    "GET",
                    &next,
                    &headers,
                    Bytes::new(),
                    limit,
                    self.deadline,
                )
                .await?;
            at = next;
        }
        if (200..300).contains(&response.status) {
            return Ok(response);
        }
        Err(self.refusal(what, &response))
    }

    /// A call answered whatever way, after answering an authentication challenge once.
    pub(crate) async fn call_any(&self, call: Call<'_>) -> Result<Response, OciError> {
        let first = self.send(&call, self.authorization()).await?;
        // Credentials are the registry's: another host (an upload's
        // `Location` elsewhere) is never answered with them.
        if first.status != 401 || !self.is_own(&call.target) {
            return Ok(first);
        }
        let Some(challenge) = first.header("www-authenticate").map(str::to_string) else {
            return Ok(first);
        };
        let authorization = if challenge.trim_start().to_ascii_lowercase().starts_with("basic") {
            match &self.credentials {
                Some(c) => c.basic(),
                None => return Ok(first),
            }
        } else {
            let token = self.bearer(&challenge).await?;
            *self.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
            format!("Bearer {token}")
        };
        self.send(&call, Some(authorization)).await
    }

    fn authorization(&self) -> Option<String> {
        let token = self.token.lock().unwrap_or_else(|p| p.into_inner()).clone();
        token.map(|t| format!("Bearer {t}"))
    }

    /// Whether `target` is this registry itself (its name: host and port).
    fn is_own(&self, target: &Target) -> bool {
        target.authority == self.name
    }

    async fn send(&self, call: &Call<'_>, authorization: Option<String>) -> Result<Response, OciError> {
        let mut headers = call.headers.clone();
        if let Some(a) = authorization.filter(|_| self.is_own(&call.target)) {
            headers.push(("Authorization", a));
        }
        self.transport
            .send(
                &self.name,
                call.method,
                &call.target,
                &headers,
                call.body.clone(),
                call.limit,
                self.deadline,
            )
            .await
    }

    /// A token from the challenge's realm, for its service and scope.
    async fn bearer(&self, challenge: &str) -> Result<String, OciError> {
        let params = challenge_params(challenge);
        let realm = params.get("realm").ok_or_else(|| OciError::Http {
            registry: self.name.clone(),
            why: format!("a bearer challenge without a realm: {challenge:?}"),
        })?;
        let https = self.transport.is_https();
        let mut target =
            Target::resolve(&self.target(String::new()), realm, https).ok_or_else(|| OciError::Http {
                registry: self.name.clone(),
                why: format!("a token realm {realm:?} this client does not follow"),
            })?;
        let query: Vec<String> = ["service", "scope"]
            .iter()
            .filter_map(|k| params.get(*k).map(|v| format!("{k}={}", encode(v))))
            .collect();
        if !query.is_empty() {
            let sep = if target.path.contains('?') { '&' } else { '?' };
            target.path = format!("{}{sep}{}", target.path, query.join("&"));
        }
        let headers: Vec<(&str, String)> = self
            .credentials
            .iter()
            .map(|c| ("Authorization", c.basic()))
            .collect();
        let response = self
            .transport
            .send(
                &self.name,
                "GET",
                &target,
                &headers,
                Bytes::new(),
                DOCUMENT_MAX,
                self.deadline,
            )
            .await?;
        if response.status != 200 {
            return Err(self.refusal("asking for a token".into(), &response));
        }
        let token: Token = serde_json::from_slice(&response.body).map_err(|e| OciError::Http {
            registry: self.name.clone(),
            why: format!("the token answer does not parse: {e}"),
        })?;
        token.token.or(token.access_token).ok_or_else(|| OciError::Http {
            registry: self.name.clone(),
            why: "the token answer holds no token".into(),
        })
    }
}

/// `Bearer realm="…",service="…",scope="…"` as a map.
fn challenge_params(challenge: &str) -> std::collections::BTreeMap<String, String> {
    let rest = challenge.trim().split_once(' ').map_or("", |(_, r)| r);
    let mut out = std::collections::BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        let key = key.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        if key.is_empty() {
            break;
        }
        let value: String = if chars.peek() == Some(&'"') {
            chars.next();
            let v = chars.by_ref().take_while(|&c| c != '"').collect();
            while chars.peek().is_some_and(|&c| c != ',') {
                chars.next();
            }
            v
        } else {
            chars.by_ref().take_while(|&c| c != ',').collect()
        };
        out.insert(key, value.trim().to_string());
    }
    out
}

/// Percent-encoding for a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_read() {
        let p = challenge_params(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:berth/naming:pull,push""#,
        );
        assert_eq!(p["realm"], "https://auth.example.com/token");
        assert_eq!(p["service"], "registry.example.com");
        assert_eq!(p["scope"], "repository:berth/naming:pull,push");
        assert_eq!(
            encode("repository:a/b:pull,push"),
            "repository%3Aa%2Fb%3Apull%2Cpush"
        );
    }

    #[test]
    fn plain_http_is_refused_beyond_loopback() {
        let r = Reference::parse("oci://registry.example.com/a:v1").unwrap();
        let access = Access {
            plain_http: Some(true),
            ..Access::default()
        };
        let err = Registry::new(&r, &access).err().unwrap().to_string();
        assert!(err.contains("loopback only"), "{err}");
        let local = Reference::parse("oci://127.0.0.1:5000/a:v1").unwrap();
        assert!(Registry::new(&local, &access).is_ok());
    }

    /// A registry whose every answer is a redirect given after 100 s: each
    /// request is within its own timeout, the operation is not.
    #[tokio::test(start_paused = true)]
    async fn one_deadline_holds_a_whole_operation_through_its_redirects() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut n = 0;
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                n += 1;
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request).await;
                    tokio::time::sleep(std::time::Duration::from_secs(100)).await;
                    let answer = format!(
                        "HTTP/1.1 302 Found\r\nLocation: /v2/a/manifests/hop-{n}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        let r = Reference::parse(&format!("oci://127.0.0.1:{port}/a:v1")).unwrap();
        let access = Access {
            plain_http: Some(true),
            docker_config: Some(PathBuf::from("/nonexistent/config.json")),
            ..Access::default()
        };
        let started = tokio::time::Instant::now();
        let err = Registry::new(&r, &access)
            .unwrap()
            .pull(&r, 1 << 20)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("the operation took longer than 300s"), "{err}");
        assert_eq!(started.elapsed().as_secs(), 300);
    }
}
