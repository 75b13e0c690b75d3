//! The sample naming policy itself, apart from its export, so that a module
//! building on it (a candidate that differs on a few inputs) can include it.

use berth_guest::{Naming, NamingRequest, get, number_setting, sanitize, stable_hash};

pub struct SampleNaming;

const CSI_NAME_LIMIT: u64 = 128;

impl Naming for SampleNaming {
    fn volume_name(request: NamingRequest) -> Result<String, String> {
        let settings = &request.settings;
        let prefix = sanitize(get(settings, "prefix").unwrap_or("pv"));
        if prefix.is_empty() {
            return Err("setting \"prefix\" has no letters or digits".into());
        }
        let max_len = number_setting(settings, "max-length", CSI_NAME_LIMIT)?;
        if !(16..=CSI_NAME_LIMIT).contains(&max_len) {
            return Err(format!("setting \"max-length\" must be 16 to 128, not {max_len}"));
        }
        let hash = format!("{:08x}", stable_hash(&request.volume.id) as u32);
        // Two separators between three parts.
        let room = (max_len as usize).saturating_sub(prefix.len() + hash.len() + 2);
        if room == 0 {
            return Err(format!(
                "prefix {prefix:?} leaves no room for the volume name within {max_len} bytes"
            ));
        }
        let mut body = sanitize(&request.volume.name);
        if body.is_empty() {
            body = "vol".into();
        }
        body.truncate(room);
        let body = body.trim_end_matches('-');
        Ok(format!("{prefix}-{body}-{hash}"))
    }
}
