//! `docker volume create -o KEY=VALUE` options as a Berth volume spec.

use std::collections::BTreeMap;

use berth_proto::berth::v1 as api;

/// What `-o` takes, as an unknown option's error lists it.
pub const VALID: &str = "plugin=NAME, size=10GiB, limit=20GiB, access=MODE (single-node-writer, …), \
fs=TYPE, block=true, secret=NAME, parameter.KEY=VALUE, mutable.KEY=VALUE, label.KEY=VALUE, \
requisite.KEY=VALUE";

/// An option Docker passed that makes no volume spec.
#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    #[error("-o {key} is not an option of Berth's volumes; valid: {VALID}")]
    Unknown { key: String },
    #[error("-o {key}={value}: {why}")]
    Value { key: String, value: String, why: String },
    #[error("-o plugin=NAME is needed: which CSI plugin makes the volume (valid: {VALID})")]
    NoPlugin,
}

/// The spec for a volume named `name` with Docker's options; `plugin` when
/// `-o plugin` is not given.
pub fn spec(
    name: &str,
    opts: &BTreeMap<String, String>,
    plugin: Option<&str>,
) -> Result<api::VolumeSpec, OptionError> {
    let mut spec = api::VolumeSpec {
        name: name.to_string(),
        plugin: plugin.unwrap_or_default().to_string(),
        ..Default::default()
    };
    let mut requisite = api::Topology::default();
    for (key, value) in opts {
        let refused = |why: String| OptionError::Value {
            key: key.clone(),
            value: value.clone(),
            why,
        };
        let bytes = || {
            berth_model::units::parse_bytes(value)
                .map(|b| b as i64)
                .map_err(|e| refused(e.to_string()))
        };
        match key.split_once('.') {
            Some(("parameter", k)) if !k.is_empty() => {
                spec.parameters.insert(k.to_string(), value.clone());
            }
            Some(("mutable", k)) if !k.is_empty() => {
                spec.mutable_parameters.insert(k.to_string(), value.clone());
            }
            Some(("label", k)) if !k.is_empty() => {
                spec.labels.insert(k.to_string(), value.clone());
            }
            Some(("requisite", k)) if !k.is_empty() => {
                requisite.segments.insert(k.to_string(), value.clone());
            }
            _ => match key.as_str() {
                "plugin" => spec.plugin = value.clone(),
                "size" => spec.required_bytes = bytes()?,
                "limit" => spec.limit_bytes = bytes()?,
                "access" => spec.access_mode = value.clone(),
                "fs" => spec.fs_type = value.clone(),
                "block" => {
                    spec.block = value.parse().map_err(|_| refused("give true or false".into()))?;
                }
                "secret" | "secrets" => spec.secret = value.clone(),
                _ => return Err(OptionError::Unknown { key: key.clone() }),
            },
        }
    }
    if spec.plugin.is_empty() {
        return Err(OptionError::NoPlugin);
    }
    if !requisite.segments.is_empty() {
        spec.requisite_topology.push(requisite);
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_become_the_spec_and_the_unknown_are_refused_with_the_valid_ones() {
        let s = spec(
            "data",
            &opts(&[
                ("size", "1GiB"),
                ("parameter.type", "ssd"),
                ("label.team", "db"),
                ("requisite.zone", "a"),
                ("access", "single-node-writer"),
            ]),
            Some("hostpath"),
        )
        .unwrap();
        assert_eq!((s.plugin.as_str(), s.required_bytes), ("hostpath", 1 << 30));
        assert_eq!(s.parameters.get("type").map(String::as_str), Some("ssd"));
        assert_eq!(s.labels.get("team").map(String::as_str), Some("db"));
        assert_eq!(
            s.requisite_topology[0].segments.get("zone").map(String::as_str),
            Some("a")
        );
        let err = spec("data", &opts(&[("color", "red")]), Some("hostpath"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("-o color") && err.contains("parameter.KEY"), "{err}");
        let err = spec("data", &opts(&[("size", "lots")]), Some("hostpath"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("-o size=lots"), "{err}");
        let err = spec("data", &opts(&[]), None).unwrap_err().to_string();
        assert!(err.contains("-o plugin"), "{err}");
    }
}
