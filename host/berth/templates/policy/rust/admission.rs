//! Admission, from the module's settings (each optional):
//! `max-volumes` a namespace may hold, `max-bytes` one volume may ask for,
//! `plugins` a new volume may use (separated by ','), `required-labels` a
//! new volume must carry (separated by ','); and every new volume gets an
//! `owner` label naming its namespace when its caller gave none.

use berth_guest::{Admission, AdmissionRequest, Call, Change, FieldChange, Verdict, get, number_setting};

impl Admission for super::Policy {
    fn admit(request: AdmissionRequest) -> Verdict {
        let settings = &request.settings;
        let (max_volumes, max_bytes) = match (
            number_setting(settings, "max-volumes", u64::MAX),
            number_setting(settings, "max-bytes", u64::MAX),
        ) {
            (Ok(v), Ok(b)) => (v, b),
            (Err(e), _) | (_, Err(e)) => return Verdict::Deny(format!("bad setting: {e}")),
        };
        let volume = &request.volume;
        match request.call {
            Call::ExpandVolume(bytes) if bytes > max_bytes => Verdict::Deny(format!(
                "{bytes} bytes is more than the {max_bytes} a volume may have"
            )),
            Call::CreateVolume => {
                if request.usage.volumes >= max_volumes {
                    return Verdict::Deny(format!(
                        "namespace {} holds {} volumes, its most",
                        request.namespace, request.usage.volumes
                    ));
                }
                if volume.capacity.required_bytes > max_bytes {
                    return Verdict::Deny(format!(
                        "{} bytes is more than the {max_bytes} a volume may have",
                        volume.capacity.required_bytes
                    ));
                }
                let listed =
                    |key: &str| get(settings, key).map(|l| l.split(',').map(str::trim).collect::<Vec<_>>());
                if let Some(plugins) = listed("plugins")
                    && !plugins.contains(&request.plugin.as_str())
                {
                    return Verdict::Deny(format!("plugin {} is not one of {plugins:?}", request.plugin));
                }
                for key in listed("required-labels").unwrap_or_default() {
                    if !key.is_empty() && get(&volume.labels, key).is_none() {
                        return Verdict::Deny(format!("a volume needs the label {key}"));
                    }
                }
                match get(&volume.labels, "owner") {
                    Some(_) => Verdict::Allow,
                    None => Verdict::AllowWith(vec![FieldChange {
                        change: Change::Label(("owner".into(), request.namespace.clone())),
                        reason: "every volume names its owner; the namespace, unless told".into(),
                    }]),
                }
            }
            _ => Verdict::Allow,
        }
    }
}

#[cfg(test)]
mod tests {
    use berth_guest::testing::admission_request;
    use berth_guest::{Admission, Verdict};

    use crate::Policy;

    #[test]
    fn a_volume_without_an_owner_gets_its_namespace() {
        let request = admission_request("team-a", "data");
        match Policy::admit(request) {
            Verdict::AllowWith(changes) => assert_eq!(changes.len(), 1),
            other => panic!("{other:?}"),
        }
    }
}
