//! What an agent may claim about its node, checked as the claim arrives:
//! labels, plugins and their fingerprints, its directories and what it
//! holds, each within `model::bounds`. A session that claims more is
//! refused (a well-behaved agent checks the same bounds before it
//! registers); a failure's text is cut to what a record keeps.

use std::collections::BTreeMap;

use berth_proto::berth::v1 as wire;

use berth_model::bounds::{self, OutOfBounds};

/// A registration within bounds.
pub fn register(r: &wire::Register) -> Result<(), OutOfBounds> {
    bounds::labels(r.labels.iter())?;
    plugins(&r.plugins)?;
    bounds::dir("staging_dir", &r.staging_dir)?;
    bounds::dir("publish_dir", &r.publish_dir)?;
    bounds::text("version", &r.version, bounds::PLAIN_MAX)?;
    for h in &r.held {
        bounds::plain("held volume", &h.berth_id)?;
        bounds::plain("held volume's plugin", &h.plugin)?;
        bounds::text(
            format_args!("held volume {}: volume id", h.berth_id),
            &h.volume_id,
            bounds::VOLUME_ID_MAX,
        )?;
    }
    Ok(())
}

/// A node's plugins within bounds: how many, their names, fingerprints.
pub fn plugins(reports: &[wire::NodePluginReport]) -> Result<(), OutOfBounds> {
    if reports.len() > bounds::NODE_PLUGINS_MAX {
        return Err(OutOfBounds {
            what: "plugins".into(),
            why: format!("{} of them, at most {}", reports.len(), bounds::NODE_PLUGINS_MAX),
        });
    }
    for p in reports {
        bounds::plain("plugin", &p.plugin)?;
        bounds::text(format_args!("plugin {}: health", p.plugin), &p.health, 16)?;
        let Some(f) = &p.fingerprint else { continue };
        let what = |field: &str| format!("plugin {}: {field}", p.plugin);
        bounds::text(what("driver"), &f.driver, bounds::DRIVER_MAX)?;
        bounds::text(
            what("vendor version"),
            &f.vendor_version,
            bounds::VENDOR_VERSION_MAX,
        )?;
        bounds::text(what("node id"), &f.node_id, bounds::NODE_ID_MAX)?;
        for caps in [&f.plugin_capabilities, &f.node_capabilities] {
            if caps.len() > bounds::CAPABILITIES_MAX {
                return Err(OutOfBounds {
                    what: what("capabilities"),
                    why: format!("{} of them, at most {}", caps.len(), bounds::CAPABILITIES_MAX),
                });
            }
            for c in caps {
                bounds::text(what("capability"), c, bounds::PLAIN_MAX)?;
            }
        }
        let topology: BTreeMap<String, String> =
            f.topology.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        bounds::segments(&what("topology"), &topology)?;
    }
    Ok(())
}

/// An unhealthy plugin's reason, cut to what is shown.
pub fn cut_reasons(reports: &mut [wire::NodePluginReport]) {
    for p in reports {
        p.reason = berth_model::cut(std::mem::take(&mut p.reason), berth_model::LAST_ERROR_MAX);
    }
}

/// A report's failure text, cut to what a record keeps.
pub fn cut_report(r: &mut wire::Report) {
    if let Some(f) = &mut r.failure {
        f.message = berth_model::cut(std::mem::take(&mut f.message), berth_model::FAILURE_MAX);
        f.call = berth_model::cut(std::mem::take(&mut f.call), bounds::PLAIN_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration() -> wire::Register {
        wire::Register {
            node: "node-a".into(),
            labels: [("zone".to_string(), "a".to_string())].into(),
            plugins: vec![wire::NodePluginReport {
                plugin: "hostpath".into(),
                health: "healthy".into(),
                reason: String::new(),
                fingerprint: Some(wire::NodeFingerprint {
                    driver: "hostpath.berth.dev".into(),
                    node_id: "node-a".into(),
                    ..Default::default()
                }),
            }],
            held: vec![],
            staging_dir: "/var/lib/berth/staging".into(),
            publish_dir: "/var/lib/berth/publish".into(),
            version: "0.1.0".into(),
        }
    }

    #[test]
    fn a_registration_within_bounds_passes() {
        assert_eq!(register(&registration()), Ok(()));
    }

    #[test]
    fn each_claim_out_of_bounds_is_refused_naming_it() {
        type Change = Box<dyn Fn(&mut wire::Register)>;
        let cases: Vec<(&str, Change)> = vec![
            (
                "plugins",
                Box::new(|r| {
                    let one = r.plugins[0].clone();
                    r.plugins = (0..=bounds::NODE_PLUGINS_MAX)
                        .map(|i| wire::NodePluginReport {
                            plugin: format!("p{i}"),
                            ..one.clone()
                        })
                        .collect();
                }),
            ),
            (
                "plugin \"../x\"",
                Box::new(|r| r.plugins[0].plugin = "../x".into()),
            ),
            (
                "node id",
                Box::new(|r| {
                    r.plugins[0].fingerprint.as_mut().unwrap().node_id = "n".repeat(bounds::NODE_ID_MAX + 1)
                }),
            ),
            (
                "labels",
                Box::new(|r| r.labels = (0..100).map(|i| (format!("k{i}"), "v".to_string())).collect()),
            ),
            ("staging_dir", Box::new(|r| r.staging_dir = "relative/dir".into())),
            ("publish_dir", Box::new(|r| r.publish_dir = "/a/../../etc".into())),
            (
                "held volume",
                Box::new(|r| {
                    r.held.push(wire::Held {
                        berth_id: "../../escape".into(),
                        plugin: "hostpath".into(),
                        volume_id: "v".into(),
                        level: 2,
                    })
                }),
            ),
        ];
        for (what, change) in cases {
            let mut r = registration();
            change(&mut r);
            let e = register(&r).expect_err(what);
            assert!(e.to_string().contains(what), "{what}: {e}");
        }
    }
}
