//! Naming: `<prefix>-<volume name>-<hash of its id>`. The hash keeps two
//! volumes with the same operator name apart on the backend.

use berth_guest::{Naming, NamingRequest, get, sanitize, stable_hash};

/// CSI allows names of up to 128 bytes.
const MAX_NAME: usize = 128;
const MAX_PREFIX: usize = 32;

impl Naming for super::Policy {
    fn volume_name(request: NamingRequest) -> Result<String, String> {
        let prefix = sanitize(get(&request.settings, "prefix").unwrap_or("pv"));
        if prefix.is_empty() || prefix.len() > MAX_PREFIX {
            return Err(format!(
                "setting \"prefix\" needs 1 to {MAX_PREFIX} letters or digits"
            ));
        }
        let digest = format!("{:08x}", stable_hash(&request.volume.id) as u32);
        let mut body = sanitize(&request.volume.name);
        if body.is_empty() {
            body = "vol".into();
        }
        // `sanitize` keeps ASCII only, so bytes and characters agree.
        body.truncate(MAX_NAME - prefix.len() - digest.len() - 2);
        Ok(format!("{prefix}-{}-{digest}", body.trim_end_matches('-')))
    }
}

#[cfg(test)]
mod tests {
    use berth_guest::testing::{pairs, volume};
    use berth_guest::{Naming, NamingRequest};

    use crate::Policy;

    #[test]
    fn names_carry_the_prefix_and_fit_csi() {
        let request = NamingRequest {
            volume: volume(&"Long Name ".repeat(40)),
            settings: pairs(&[("prefix", "team-a")]),
        };
        let name = Policy::volume_name(request).unwrap();
        assert!(name.starts_with("team-a-long-name-"), "{name}");
        assert!(name.len() <= 128);
    }
}
