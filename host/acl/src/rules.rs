//! An ACL policy's rules, as the operator writes them (TOML):
//!
//! ```toml
//! node = "read"              # node, plugin, policy, operator: "read", "write" or "deny"
//!
//! [namespace.team-a]         # a namespace, or a pattern with '*' ("team-*", "*")
//! capabilities = ["list", "read", "write", "mount"]
//!
//! [namespace.secret-team]
//! capabilities = ["deny"]    # whatever else matches, nothing here
//! ```
//!
//! Invariant: deny wins. A capability is granted in a namespace when some
//! rule matching the namespace grants it and none matching it denies;
//! across a token's policies, the same. An area is granted at the highest
//! level any policy gives it, unless one denies it.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::capability::{Area, Level, VolumeCap};
use berth_model::settings::ConfigError;

/// The longest rules text a policy may have.
pub const RULES_MAX: usize = 64 * 1024;
/// The most namespace rules one policy may have.
pub const NAMESPACE_RULES_MAX: usize = 256;

/// What one rule lists: capabilities, or a denial of them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Listed {
    List,
    Read,
    Write,
    Mount,
    Deny,
}

/// An area's grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Grant {
    Deny,
    Read,
    Write,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    namespace: BTreeMap<String, NamespaceTable>,
    node: Option<Grant>,
    plugin: Option<Grant>,
    policy: Option<Grant>,
    operator: Option<Grant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceTable {
    capabilities: Vec<Listed>,
}

/// A namespace rule, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NamespaceRule {
    pattern: String,
    deny: bool,
    capabilities: Vec<VolumeCap>,
}

/// A policy's rules, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    namespaces: Vec<NamespaceRule>,
    areas: BTreeMap<&'static str, Grant>,
}

/// What one policy says of a namespace capability or an area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny,
    Silent,
}

/// Whether `pattern` (a name, `*` standing for any run of characters)
/// takes `namespace`.
fn matches(pattern: &str, namespace: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == namespace,
        Some((head, rest)) => {
            let Some(after) = namespace.strip_prefix(head) else {
                return false;
            };
            (0..=after.len()).any(|i| after.is_char_boundary(i) && matches(rest, &after[i..]))
        }
    }
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

impl Rules {
    /// Rules from their text, refused with the key at fault.
    pub fn parse(text: &str) -> Result<Rules, ConfigError> {
        if text.len() > RULES_MAX {
            return Err(invalid(
                "rules",
                format!("{} bytes, at most {RULES_MAX}", text.len()),
            ));
        }
        let doc: Document = berth_model::strict_toml::from_toml(text)?;
        if doc.namespace.len() > NAMESPACE_RULES_MAX {
            return Err(invalid(
                "namespace",
                format!("at most {NAMESPACE_RULES_MAX} rules"),
            ));
        }
        let mut namespaces = Vec::new();
        for (pattern, table) in doc.namespace {
            let key = format!("namespace.{pattern}");
            let plain = pattern.replace('*', "a");
            if pattern.is_empty() || berth_model::Namespace::parse(&plain).is_err() {
                return Err(invalid(
                    key,
                    "a namespace (lowercase letters, digits, '-') or a pattern of one with '*'",
                ));
            }
            if table.capabilities.is_empty() {
                return Err(invalid(
                    format!("{key}.capabilities"),
                    "name at least one, or \"deny\"",
                ));
            }
            let deny = table.capabilities.contains(&Listed::Deny);
            if deny && table.capabilities.len() > 1 {
                return Err(invalid(
                    format!("{key}.capabilities"),
                    "\"deny\" stands alone: it refuses every capability",
                ));
            }
            let mut capabilities: Vec<VolumeCap> = table
                .capabilities
                .iter()
                .filter_map(|c| match c {
                    Listed::List => Some(VolumeCap::List),
                    Listed::Read => Some(VolumeCap::Read),
                    Listed::Write => Some(VolumeCap::Write),
                    Listed::Mount => Some(VolumeCap::Mount),
                    Listed::Deny => None,
                })
                .collect();
            capabilities.dedup();
            namespaces.push(NamespaceRule {
                pattern,
                deny,
                capabilities,
            });
        }
        let mut areas = BTreeMap::new();
        for (area, grant) in [
            (Area::Node, doc.node),
            (Area::Plugin, doc.plugin),
            (Area::Policy, doc.policy),
            (Area::Operator, doc.operator),
        ] {
            if let Some(grant) = grant {
                areas.insert(area.as_str(), grant);
            }
        }
        Ok(Rules { namespaces, areas })
    }

    /// What these rules say of `cap` in `namespace`.
    pub fn volumes(&self, namespace: &str, cap: VolumeCap) -> Verdict {
        let mut verdict = Verdict::Silent;
        for rule in self.namespaces.iter().filter(|r| matches(&r.pattern, namespace)) {
            if rule.deny {
                return Verdict::Deny;
            }
            if rule.capabilities.contains(&cap) {
                verdict = Verdict::Allow;
            }
        }
        verdict
    }

    /// What these rules say of `level` in `area`.
    pub fn area(&self, area: Area, level: Level) -> Verdict {
        match self.areas.get(area.as_str()) {
            None => Verdict::Silent,
            Some(Grant::Deny) => Verdict::Deny,
            Some(Grant::Read) if level == Level::Write => Verdict::Silent,
            Some(_) => Verdict::Allow,
        }
    }
}

/// Deny wins across several policies' verdicts; silence grants nothing.
pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> bool {
    let mut allowed = false;
    for v in verdicts {
        match v {
            Verdict::Deny => return false,
            Verdict::Allow => allowed = true,
            Verdict::Silent => {}
        }
    }
    allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_take_what_they_spell() {
        assert!(matches("team-a", "team-a") && !matches("team-a", "team-ab"));
        assert!(matches("team-*", "team-a") && matches("team-*", "team-") && !matches("team-*", "ops"));
        assert!(matches("*", "anything") && matches("*-prod", "web-prod") && !matches("*-prod", "web-dev"));
        assert!(matches("a*b*c", "a-b-c") && !matches("a*b*c", "a-c"));
    }

    #[test]
    fn deny_wins_within_a_policy_and_across_policies() {
        let rules = Rules::parse(
            "node = \"read\"\n[namespace.\"team-*\"]\ncapabilities = [\"list\", \"read\"]\n\
             [namespace.team-a]\ncapabilities = [\"write\"]\n[namespace.team-secret]\ncapabilities = [\"deny\"]\n",
        )
        .unwrap();
        assert_eq!(rules.volumes("team-a", VolumeCap::Write), Verdict::Allow);
        assert_eq!(rules.volumes("team-a", VolumeCap::Read), Verdict::Allow);
        assert_eq!(rules.volumes("team-b", VolumeCap::Write), Verdict::Silent);
        assert_eq!(rules.volumes("team-secret", VolumeCap::List), Verdict::Deny);
        assert_eq!(rules.volumes("default", VolumeCap::List), Verdict::Silent);
        assert_eq!(rules.area(Area::Node, Level::Read), Verdict::Allow);
        assert_eq!(rules.area(Area::Node, Level::Write), Verdict::Silent);
        assert_eq!(rules.area(Area::Operator, Level::Read), Verdict::Silent);
        let everything =
            Rules::parse("[namespace.\"*\"]\ncapabilities = [\"list\", \"read\", \"write\", \"mount\"]\n")
                .unwrap();
        let secret = VolumeCap::ALL.iter().map(|&cap| {
            combine([
                everything.volumes("team-secret", cap),
                rules.volumes("team-secret", cap),
            ])
        });
        assert!(secret.into_iter().all(|allowed| !allowed));
        assert!(combine([
            everything.volumes("ops", VolumeCap::Mount),
            rules.volumes("ops", VolumeCap::Mount)
        ]));
        assert!(!combine([Verdict::Silent, Verdict::Silent]));
    }

    #[test]
    fn bad_rules_name_their_key() {
        for (text, key) in [
            (
                "[namespace.\"Team\"]\ncapabilities = [\"read\"]\n",
                "namespace.Team",
            ),
            ("[namespace.a]\ncapabilities = []\n", "namespace.a.capabilities"),
            (
                "[namespace.a]\ncapabilities = [\"deny\", \"read\"]\n",
                "namespace.a.capabilities",
            ),
        ] {
            let e = Rules::parse(text).unwrap_err();
            assert_eq!(e.key(), Some(key), "{text}: {e}");
        }
        for text in [
            "nodes = \"read\"\n",
            "node = \"admin\"\n",
            "[namespace.a]\ncapabilities = [\"own\"]\n",
        ] {
            assert!(Rules::parse(text).is_err(), "{text}");
        }
        assert!(Rules::parse(&"#".repeat(RULES_MAX + 1)).is_err());
        assert_eq!(Rules::parse("").unwrap(), Rules::default());
    }
}
