//! What `verify` says of each thing it checks: a verdict and why ([`super::verify`] decides
//! them, [`super::rederive`] too).

use serde::Serialize;

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Verdict {
        Same = "same",
        Different = "different",
        NotHere = "not re-runnable here",
    }
}

/// One line of `verify`: what was checked, the verdict, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub what: String,
    pub verdict: Verdict,
    pub why: String,
}

impl Check {
    pub fn new(what: impl Into<String>, verdict: Verdict, why: impl Into<String>) -> Self {
        Check { what: what.into(), verdict, why: why.into() }
    }
}
