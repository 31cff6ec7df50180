//! `hefprobe doctor`: run first on a device host. One table of what hefprobe found (HailoRT,
//! device, server side, the HEF's target, which diagnostics this device allows); exit 0 when a
//! device is usable, 1 when something is missing, 2 on a bad HEF.

use super::device::parse_device;
use crate::device::doctor::{self, Verdict};
use crate::device::SimProfile;
use crate::error::Result;
use crate::hef::Hef;
use crate::report::doc::{Doc, Table};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// A HEF to check against the device (its target architecture; a HEF hefprobe wrote selects
    /// the simulated device).
    pub hef: Option<PathBuf>,
    /// The simulated device for a simulated HEF: `sim` (default) or `sim-h10`.
    #[arg(long, value_name = "DEVICE", value_parser = parse_device, requires = "hef")]
    pub device: Option<SimProfile>,
}

pub fn run(a: DoctorArgs) -> Result<ExitCode> {
    let hef = a.hef.as_deref().map(|p| Hef::read(p).map(|h| (p, h))).transpose()?;
    let hef_ref = hef.as_ref().map(|(p, h)| (*p, h));
    let probe = doctor::probe(hef_ref, a.device)?;
    let findings = doctor::findings(&probe, &doctor::device_nodes(Path::new("/dev")), hef_ref);
    let mut t = Table::new(["check", "", "found"]);
    for f in &findings {
        t.row([f.item.clone(), f.verdict.name().to_string(), f.detail.clone()]);
    }
    let usable = doctor::device_usable(&findings);
    let mut d = Doc::new();
    d.table(t);
    let missing = findings.iter().filter(|f| f.verdict == Verdict::Missing).count();
    d.line(if usable {
        "a device hefprobe can run on: continue with the hardware checklist (README)".to_string()
    } else {
        format!("{missing} missing: no device hefprobe can run on yet (fix the MISSING rows first)")
    });
    crate::out!("{}", d.terminal(false));
    Ok(if usable { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
