//! `[[policy]]` tables: in `berth.toml`, and as a policy set (a file of
//! them, applied to the whole cluster and stored as text with a version).
//! A set is stored pinned: every module a digest (a registry reference by
//! its manifest's, a file by its SHA-256), every path absolute, so every
//! server that loads it runs the same bytes or refuses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{ConfigError, PolicyConfig, duration, invalid, oci, size};
use berth_policy::{Decision, Limits, ModuleConfig, OnError};

/// The most a stored set may take: far below what a store takes in one record.
pub const SET_MAX: usize = 64 << 10;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub module: String,
    /// The module file's SHA-256 (`sha256:…`), which a set pins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    decisions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on_error: Option<OnError>,
    /// `shadow`: decides beside the live module, its answers compared, never used.
    #[serde(default, skip_serializing_if = "Mode::is_live")]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deadline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_answer: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    settings: BTreeMap<String, String>,
}

impl RawPolicy {
    /// Serves (or shadows) exactly `decisions`.
    pub fn set_decisions(&mut self, decisions: &[Decision]) {
        self.decisions = decisions.iter().map(ToString::to_string).collect();
    }

    /// The name the table gives the module, if it gives one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The decisions the table names (none: every decision the module exports).
    pub fn decisions(&self) -> &[String] {
        &self.decisions
    }
}

/// What a module is called when its table gives no name: its file's stem,
/// or its repository's last component (`oci://r/team/naming:v2` → `naming`).
pub fn default_name(module: &str) -> String {
    let last = module.rsplit('/').next().unwrap_or(module);
    let last = match module.starts_with("oci://") {
        true => last.split(['@', ':']).next().unwrap_or(last),
        false => last.strip_suffix(".wasm").unwrap_or(last),
    };
    if last.is_empty() {
        "module".into()
    } else {
        last.to_string()
    }
}

impl SetDraft {
    /// This set with `module` (an absolute path or an `oci://` reference)
    /// shadowing `decisions`, in place of whatever shadowed them before.
    pub fn with_shadow(
        mut self,
        module: String,
        name: Option<String>,
        decisions: &[Decision],
        settings: BTreeMap<String, String>,
    ) -> SetDraft {
        let taken: Vec<String> = decisions.iter().map(ToString::to_string).collect();
        for t in &mut self.tables {
            if t.mode == Mode::Shadow {
                t.decisions.retain(|d| !taken.contains(d));
            }
        }
        self.tables
            .retain(|t| t.mode == Mode::Live || !t.decisions.is_empty());
        // Named apart from the live module it shadows, whose file or
        // repository it often shares a name with.
        let name = name.or_else(|| Some(format!("{}-shadow", default_name(&module))));
        self.tables.push(RawPolicy {
            module,
            digest: None,
            name,
            decisions: taken,
            on_error: None,
            memory: None,
            deadline: None,
            max_answer: None,
            settings,
            mode: Mode::Shadow,
        });
        self
    }
}

/// Whether a module's answers are used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    #[default]
    Live,
    Shadow,
}

impl Mode {
    pub fn is_live(&self) -> bool {
        *self == Mode::Live
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSet {
    #[serde(default, rename = "policy")]
    policies: Vec<RawPolicy>,
}

/// A set's tables, file paths made absolute; pinned by the server before
/// it is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetDraft {
    pub tables: Vec<RawPolicy>,
}

impl SetDraft {
    pub(crate) fn from_raw(mut tables: Vec<RawPolicy>, base: &Path) -> SetDraft {
        for t in &mut tables {
            if !t.module.starts_with("oci://") && !Path::new(&t.module).is_absolute() {
                t.module = base.join(&t.module).display().to_string();
            }
        }
        SetDraft { tables }
    }

    /// A set file's text; relative module paths are taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<SetDraft, ConfigError> {
        let draft = SetDraft::parse_unchecked(text, base)?;
        draft.policies()?;
        Ok(draft)
    }

    /// A set file being applied: a module may name a registry tag, which
    /// the server resolves to its digest (and pins) before storing the set.
    pub fn parse_to_apply(text: &str, base: &Path) -> Result<SetDraft, ConfigError> {
        let draft = SetDraft::parse_unchecked(text, base)?;
        draft.checked(true)?;
        Ok(draft)
    }

    fn parse_unchecked(text: &str, base: &Path) -> Result<SetDraft, ConfigError> {
        if text.len() > SET_MAX {
            return Err(invalid(
                "policy",
                format!("a policy set is at most {SET_MAX} bytes"),
            ));
        }
        let raw: RawSet = berth_model::strict_toml::from_toml(text)?;
        Ok(SetDraft::from_raw(raw.policies, base))
    }

    /// The set as stored: `[[policy]]` tables.
    pub fn text(&self) -> String {
        toml::to_string(&RawSet {
            policies: self.tables.clone(),
        })
        .expect("a policy set serializes")
    }

    /// The modules, checked as `berth.toml`'s are (registry modules pinned).
    pub fn policies(&self) -> Result<Vec<PolicyConfig>, ConfigError> {
        self.checked(false)
    }

    fn checked(&self, tag_allowed: bool) -> Result<Vec<PolicyConfig>, ConfigError> {
        let mut policies: Vec<PolicyConfig> = Vec::new();
        for (i, p) in self.tables.iter().enumerate() {
            let at = format!("policy[{i}]");
            let decisions = p
                .decisions
                .iter()
                .map(|d| {
                    d.parse::<Decision>()
                        .map_err(|e| invalid(format!("{at}.decisions"), e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let defaults = Limits::default();
            let source = oci::module_reference(&format!("{at}.module"), Path::new(&p.module), tag_allowed)?;
            if let Some(d) = &p.digest
                && berth_oci::Digest::parse(d).is_err()
            {
                return Err(invalid(
                    format!("{at}.digest"),
                    format!("{d:?} is not sha256: and 64 hex digits"),
                ));
            }
            let mut module = match &source {
                Some(r) => ModuleConfig {
                    path: PathBuf::new(),
                    ..ModuleConfig::from_path(Path::new(r.repository.rsplit('/').next().unwrap_or("module")))
                },
                None => ModuleConfig::from_path(Path::new(&p.module)),
            };
            if let Some(name) = &p.name {
                module.name = name.clone();
            }
            module.settings = p.settings.clone();
            module.on_error = p.on_error.unwrap_or_default();
            module.limits = Limits {
                memory_bytes: size(
                    &format!("{at}.memory"),
                    p.memory.as_deref(),
                    defaults.memory_bytes,
                )?,
                deadline: match p.deadline.as_deref() {
                    None => defaults.deadline,
                    Some(d) => duration(&format!("{at}.deadline"), Some(d), "0")?,
                },
                max_answer_bytes: size(
                    &format!("{at}.max_answer"),
                    p.max_answer.as_deref(),
                    defaults.max_answer_bytes,
                )?,
            };
            if module.limits.deadline.is_zero() {
                return Err(invalid(format!("{at}.deadline"), "must be more than zero"));
            }
            let shadow = p.mode == Mode::Shadow;
            if shadow && decisions.is_empty() {
                return Err(invalid(
                    format!("{at}.decisions"),
                    "a shadow module names the decisions it shadows",
                ));
            }
            for d in &decisions {
                if let Some((j, _)) = policies
                    .iter()
                    .enumerate()
                    .find(|(_, q)| q.shadow == shadow && q.decisions.contains(d))
                {
                    let (what, role) = if shadow {
                        ("shadowed", "shadow module")
                    } else {
                        ("served", "module")
                    };
                    return Err(invalid(
                        format!("{at}.decisions"),
                        format!(
                            "{d} is {what} by policy[{j}] ({}) already; give each decision one {role}",
                            self.tables[j].module
                        ),
                    ));
                }
            }
            policies.push(PolicyConfig {
                module,
                decisions,
                source,
                digest: p.digest.clone(),
                shadow,
            });
        }
        Ok(policies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shadow_is_named_apart_from_the_module_it_shadows() {
        let draft = SetDraft::parse("[[policy]]\nmodule = \"naming.wasm\"\n", Path::new("/p")).unwrap();
        let shadowed = draft.clone().with_shadow(
            "/q/naming.wasm".into(),
            None,
            &[Decision::Naming],
            BTreeMap::new(),
        );
        assert_eq!(shadowed.tables[1].name(), Some("naming-shadow"));
        assert_eq!(shadowed.tables[1].mode, Mode::Shadow);
        let named = draft.with_shadow(
            "oci://r.io/team/naming:v2".into(),
            Some("candidate".into()),
            &[Decision::Naming],
            BTreeMap::new(),
        );
        assert_eq!(named.tables[1].name(), Some("candidate"));
        assert_eq!(default_name("oci://r.io/team/naming:v2"), "naming");
        assert_eq!(default_name("oci://r.io:5000/naming@sha256:ab"), "naming");
        assert_eq!(default_name("/x/retry.wasm"), "retry");
    }

    #[test]
    fn a_set_round_trips_through_its_stored_text_with_paths_made_absolute() {
        let text = r#"
[[policy]]
module = "naming.wasm"
settings = { prefix = "team" }

[[policy]]
module = "oci://r.io/retry@sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
decisions = ["retry"]
deadline = "50ms"
"#;
        let draft = SetDraft::parse(text, Path::new("/etc/berth")).unwrap();
        assert_eq!(draft.tables[0].module, "/etc/berth/naming.wasm");
        let again = SetDraft::parse(&draft.text(), Path::new("/elsewhere")).unwrap();
        assert_eq!(again, draft, "the stored text means the same wherever it is read");
        let p = again.policies().unwrap();
        assert_eq!(p[1].module.limits.deadline, std::time::Duration::from_millis(50));
        assert!(p[1].source.is_some());

        for bad in [
            "[[policy]]\nmodule = \"x.wasm\"\nbogus = 1\n",
            "[[policy]]\nmodule = \"x.wasm\"\ndigest = \"md5:00\"\n",
            "[[policy]]\nmodule = \"oci://r.io/a:v1\"\n",
            "plugin = []\n",
        ] {
            assert!(SetDraft::parse(bad, Path::new("/")).is_err(), "{bad}");
        }
    }
}
