//! Where a module is: `oci://HOST[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST]`,
//! checked as the distribution spec names things, so nothing taken from a
//! reference can reach a path or a URL it should not.

use crate::{Digest, OciError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

const SCHEME: &str = "oci://";

impl Reference {
    /// A reference, with or without `oci://`, naming a tag or a digest.
    pub fn parse(text: &str) -> Result<Reference, OciError> {
        Reference::parse_with(text, true)
    }

    /// A place to push to: a tag is optional (without one, the module is
    /// known by its digest only).
    pub fn parse_destination(text: &str) -> Result<Reference, OciError> {
        Reference::parse_with(text, false)
    }

    fn parse_with(text: &str, versioned: bool) -> Result<Reference, OciError> {
        let bad = |why| OciError::Reference(text.to_string(), why);
        let rest = text.strip_prefix(SCHEME).unwrap_or(text);
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("no repository"))?;
        if !host_ok(registry) {
            return Err(bad("the registry must be HOST or HOST:PORT"));
        }
        let (path, digest) = match path.split_once('@') {
            Some((p, d)) => (p, Some(Digest::parse(d)?)),
            None => (path, None),
        };
        let last_slash = path.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match path[last_slash..].rfind(':') {
            Some(i) => (&path[..last_slash + i], Some(&path[last_slash + i + 1..])),
            None => (path, None),
        };
        if repository.len() > 255 || !repository.split('/').all(component_ok) {
            return Err(bad(
                "a repository is lowercase path components of letters and digits, separated by . _ __ or -",
            ));
        }
        if let Some(tag) = tag
            && !tag_ok(tag)
        {
            return Err(bad(
                "a tag is up to 128 letters, digits, _ . and -, not starting with . or -",
            ));
        }
        if versioned && tag.is_none() && digest.is_none() {
            return Err(bad("name a tag (:TAG) or a digest (@sha256:…)"));
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// What the registry is asked for: the digest when there is one.
    pub fn manifest_ref(&self) -> Option<String> {
        match (&self.digest, &self.tag) {
            (Some(d), _) => Some(d.to_string()),
            (None, Some(t)) => Some(t.clone()),
            (None, None) => None,
        }
    }

    /// The same repository, pinned to `digest` (the tag dropped).
    pub fn pinned(&self, digest: Digest) -> Reference {
        Reference {
            tag: None,
            digest: Some(digest),
            ..self.clone()
        }
    }

    /// The registry's host, without the port.
    pub fn host(&self) -> &str {
        self.registry
            .rsplit_once(':')
            .map_or(self.registry.as_str(), |(h, _)| h)
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn host_ok(registry: &str) -> bool {
    let (host, port) = match registry.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (registry, None),
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    host_ok && port_ok
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn component_ok(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`
fn tag_ok(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn references_parse_and_print_back() {
        let r = Reference::parse(&format!("oci://127.0.0.1:5000/berth/naming@{DIGEST}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.host(), "127.0.0.1");
        assert_eq!(r.repository, "berth/naming");
        assert_eq!(r.tag, None);
        assert_eq!(r.manifest_ref().as_deref(), Some(DIGEST));
        assert_eq!(
            r.to_string(),
            format!("oci://127.0.0.1:5000/berth/naming@{DIGEST}")
        );

        let r = Reference::parse("registry.example.com/team/policies/naming:v1.2").unwrap();
        assert_eq!(r.repository, "team/policies/naming");
        assert_eq!(r.tag.as_deref(), Some("v1.2"));
        assert_eq!(r.host(), "registry.example.com");
        let pinned = r.pinned(Digest::parse(DIGEST).unwrap());
        assert_eq!(
            pinned.to_string(),
            format!("oci://registry.example.com/team/policies/naming@{DIGEST}")
        );
        let both = Reference::parse(&format!("oci://r.io/a:v1@{DIGEST}")).unwrap();
        assert_eq!(both.manifest_ref().as_deref(), Some(DIGEST), "the digest wins");
        let bare = Reference::parse_destination("oci://r.io/a").unwrap();
        assert_eq!(bare.manifest_ref(), None);
    }

    #[test]
    fn what_could_reach_a_path_or_url_is_refused() {
        for bad in [
            "oci://r.io/../etc:v1",
            "oci://r.io/a/../b:v1",
            "oci://r.io/Upper:v1",
            "oci://r.io/a?x=1:v1",
            "oci://r.io/a#frag:v1",
            "oci://r.io/a:v/1",
            "oci://r.io/a:.hidden",
            "oci://r.io/a",
            "oci://r.io/a@sha256:short",
            "oci://user@r.io/a:v1",
            "oci:///a:v1",
            "oci://r.io:port/a:v1",
            "oci://r.io/a:v1 x",
            "oci://r.io//a:v1",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad} was taken");
        }
    }
}
