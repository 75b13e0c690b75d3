//! Conformance reports as the store keeps them: the latest `berth plugin
//! check` recorded for each configured plugin, shown beside its health.

/// How one case of a check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaseVerdict {
    Passed,
    Failed,
    Warning,
    Skipped,
}

impl CaseVerdict {
    pub const ALL: [CaseVerdict; 4] = [
        CaseVerdict::Passed,
        CaseVerdict::Failed,
        CaseVerdict::Warning,
        CaseVerdict::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CaseVerdict::Passed => "passed",
            CaseVerdict::Failed => "failed",
            CaseVerdict::Warning => "warning",
            CaseVerdict::Skipped => "skipped",
        }
    }

    /// The verdict of that name; none for any other text.
    pub fn parse(text: &str) -> Option<CaseVerdict> {
        CaseVerdict::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

/// One rule of the check held against one call.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckCaseRecord {
    pub name: String,
    pub rule: String,
    pub verdict: CaseVerdict,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub must: bool,
}

/// The latest conformance report of one configured plugin, stored under
/// the plugin's name; who recorded it and when are the server's.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginCheckRecord {
    /// The configured plugin's name.
    pub plugin: String,
    /// The driver's name and version, as the check's GetPluginInfo saw them.
    pub driver: String,
    pub vendor_version: String,
    pub recorded_ms: u64,
    /// The identity that recorded it, as the audit log names it.
    pub recorded_by: String,
    pub cases: Vec<CheckCaseRecord>,
}

impl PluginCheckRecord {
    /// How many cases ended with `verdict`.
    pub fn count(&self, verdict: CaseVerdict) -> usize {
        self.cases.iter().filter(|c| c.verdict == verdict).count()
    }
}
