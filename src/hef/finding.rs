//! Findings shared by the config reader, the audit and the diff.

use serde::Serialize;

crate::named_enum! {
    /// How bad a finding is. Ordered so sorting puts errors first.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Severity {
        /// HailoRT/genai will fail, or will run and produce wrong tokens.
        Error = "error",
        /// Probably a mistake, or HailoRT silently does something other than intended.
        Warning = "warning",
        /// Worth knowing; nothing is wrong by itself.
        Info = "info",
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One audit finding. `id` is stable (scripts and tests match on it); `finding` links to the
/// row of the project's findings table that this check guards against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub severity: Severity,
    pub finding: Option<u32>,
    /// The network group concerned, if any.
    pub group: Option<String>,
    pub message: String,
}

impl Finding {
    pub fn new(id: &'static str, severity: Severity, message: impl Into<String>) -> Self {
        Finding { id, severity, finding: None, group: None, message: message.into() }
    }

    /// Link to a row of the findings table.
    pub fn table(mut self, number: u32) -> Self {
        self.finding = Some(number);
        self
    }

    pub fn in_group(mut self, group: &str) -> Self {
        self.group = Some(group.to_string());
        self
    }
}
