//! The choice of device for a HEF: the simulated device for a HEF `synth-hef` wrote (as the
//! `sim` or `sim-h10` profile), the real Hailo-10H otherwise (feature `hailo`), the HEF's
//! architecture checked against the device's and its LLM driver opened.

use super::driver::LlmDriver;
use super::sim::SimDevice;
use super::synth_hef::{sim_spec, SimSpec};
use super::{Device, DeviceFacts, SimProfile};
use crate::error::{Error, Result};
use crate::hef::Hef;
use std::path::Path;
use std::sync::Arc;

/// A HEF open on the device it needs, its LLM driver ready.
pub struct Opened {
    /// Kept alive for the driver's configured models.
    pub device: Box<dyn Device>,
    pub hef: Arc<Hef>,
    pub driver: LlmDriver,
    pub facts: DeviceFacts,
    /// One sentence naming the device ([`Device::describe`]).
    pub description: String,
    /// For a HEF hefprobe simulates: the checkpoint hash it was made from, and what it computes.
    pub sim: Option<(String, SimSpec)>,
}

/// The HEF at `path` on its device ([`device_for`]), its architecture checked against the
/// device's and its LLM driver opened on the groups `group` names (genai's choice when None).
pub fn open(path: &Path, profile: Option<SimProfile>, group: Option<&str>) -> Result<Opened> {
    let what = path.display().to_string();
    let (mut device, hef, sim) = device_for(path, profile)?;
    let facts = device.facts();
    check_arch(hef.hw_arch, facts.architecture.as_deref(), &what)?;
    let driver = LlmDriver::open_sharing(device.as_mut(), &hef, &what, group, &std::sync::OnceLock::new())?;
    let description = device.describe();
    Ok(Opened { device, hef, driver, facts, description, sim })
}

/// A device, the HEF it runs, and for a simulated HEF the checkpoint hash it was made from.
type Found = (Box<dyn Device>, Arc<Hef>, Option<(String, SimSpec)>);

/// The device a HEF needs: simulated when hefprobe wrote it (as `profile`, default `sim`), else
/// the real one (where a simulator profile is a usage error).
fn device_for(path: &Path, profile: Option<SimProfile>) -> Result<Found> {
    let what = path.display().to_string();
    let hef = Arc::new(Hef::read(path)?);
    if let Some(spec) = sim_spec(&hef, &what)? {
        let dev = SimDevice::with_profile(hef.clone(), spec.clone(), what, profile.unwrap_or_default())?;
        let made_from = dev.checkpoint.hash.clone();
        return Ok((Box::new(dev), hef, Some((made_from, spec))));
    }
    if let Some(p) = profile {
        return Err(Error::usage(format!(
            "device `{}` simulates a device, but {what} is a compiled HEF (no hefprobe-sim.json resource): \
             leave the device choice out to run it on the real device",
            p.name()
        )));
    }
    Ok((real_device(path)?, hef, None))
}

#[cfg(feature = "hailo")]
fn real_device(path: &Path) -> Result<Box<dyn Device>> {
    Ok(Box::new(crate::device::hailo::HailoDevice::open(path)?))
}

#[cfg(not(feature = "hailo"))]
fn real_device(path: &Path) -> Result<Box<dyn Device>> {
    Err(Error::Unsupported(format!(
        "{} is a compiled HEF, not one hefprobe simulates: running it needs a Hailo-10H and HailoRT 5.x. \
         On the device host build with `cargo build --release --features hailo` (HAILORT_INCLUDE_DIR / \
         HAILORT_LIB_DIR if not in /usr), or record a capture there with `hefprobe capture` and compare it here",
        path.display()
    )))
}

/// A HEF built for an architecture the device does not run is an input error, as HailoRT's
/// HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE would be (the table: [`crate::hef::arch`]).
pub fn check_arch(hw_arch: i32, device_arch: Option<&str>, what: &str) -> Result<()> {
    match device_arch {
        Some(arch) if !crate::hef::arch::runs_on(hw_arch, arch) => Err(Error::input(
            what,
            format!(
                "was built for {} (hw_arch {hw_arch}), which a {arch} device does not run (HailoRT: \
                 HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE); compile the HEF for {arch}",
                crate::hef::arch::hw_arch_name(hw_arch),
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::doctor::{findings, Probe, Verdict};
    use crate::device::RealDevice;

    /// `doctor` and every device open (the suite's, `run`'s) judge a HEF's architecture by the
    /// same table: for every hw_arch and every device HailoRT 5.2 names, doctor's verdict is
    /// ok exactly where the open accepts the HEF.
    #[test]
    fn doctor_and_the_device_open_agree_on_every_architecture_pair() {
        let devices =
            ["HAILO8_A0", "HAILO8", "HAILO8L", "HAILO15H", "HAILO15L", "HAILO15M", "HAILO10H", "HAILO12L"];
        for hw_arch in (0..=8).chain(99..=110) {
            let hef = Hef {
                version: 0,
                hw_arch,
                sdk_version: String::new(),
                groups: Vec::new(),
                resources: Vec::new(),
                extensions: Vec::new(),
            };
            for arch in devices {
                let probe = Probe::Real {
                    library: Ok((5, 2, 0)),
                    device: Ok(RealDevice {
                        device_ids: "x".into(),
                        architecture: Some(arch.into()),
                        cache_local: true,
                    }),
                };
                let f = findings(&probe, &[], Some((Path::new("m.hef"), &hef)));
                let doctor = f.iter().find(|x| x.item == "HEF m.hef").expect("a HEF finding").verdict;
                let opens = check_arch(hw_arch, Some(arch), "m.hef").is_ok();
                assert_eq!(doctor == Verdict::Ok, opens, "hw_arch {hw_arch} on {arch}");
            }
        }
        assert!(check_arch(5, Some("HAILO10H"), "m.hef").is_err(), "the deprecated id runs nowhere");
        assert!(check_arch(0, Some("HAILO8"), "m.hef").is_ok());
    }
}
