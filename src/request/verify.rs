//! `hefprobe verify DIR`: replay an evidence bundle (`run --bundle DIR`, `suite`, `sweep`):
//! hashes, then every figure and document re-run and compared.

use crate::error::Result;
use crate::probe::checks::Verified;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct Verify {
    pub bundle: PathBuf,
}

impl Verify {
    pub fn run(&self) -> Result<Verified> {
        let manifest = crate::probe::verify::read_manifest(&self.bundle)?;
        let checks = crate::suite::bundle::verify(&self.bundle, &manifest)?;
        Ok(Verified { bundle: self.bundle.clone(), checks, manifest })
    }
}
