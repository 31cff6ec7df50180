//! Device targets: each HEF is opened once per suite run (its facts read, its architecture
//! checked) and shared by every probe; before a pair is compared, its InputSet runs
//! `[gate] runs` times on the device (`explain::diag::repeatability`). A device that disagrees
//! with itself — logits cosine between runs below `[gate] min_cosine`, or another argmax for
//! the same inputs — is "unstable": its comparisons could show noise as drift, so the pair is
//! not compared at all, and it is never reported as a regression. A stable device's spread
//! widens the pair's noise band.

use super::result::GateResult;
use super::spec::{GateSpec, Target};
use crate::backend::hef::{open_device, HefBackend};
use crate::backend::{Backend, BackendRun, Capabilities};
use crate::capture::Capture;
use crate::device::driver::LlmDriver;
use crate::device::sim::SimDevice;
use crate::device::synth_hef::sim_spec;
use crate::device::{Device, DeviceFacts};
use crate::error::{Error, Result};
use crate::explain::diag::{repeatability, Spread};
use crate::hef::model::hw_arch_name;
use crate::hef::Hef;
use crate::inputs::InputSet;
use crate::tap::TapSelection;
use std::cell::RefCell;
use std::rc::Rc;

/// A HEF target, open on its device for the whole run.
pub struct OpenDevice {
    pub backend: Rc<RefCell<HefBackend>>,
    pub facts: DeviceFacts,
    /// The checkpoint hash a simulated HEF was made from (a compiled HEF does not say).
    pub made_from: Option<String>,
}

/// Which HEF architectures a device runs: HailoRT's `DeviceBase::is_hef_compatible`
/// (hailort/libhailort/src/device_common/device_internal.cpp), with the ids of hef.proto's
/// `ProtoHEFHwArch` (HAILO8P 1, HAILO8R 2, HAILO8L 3, HAILO15M 4, HAILO10H 5, HAILO15L 6,
/// HAILO1XH 103 — HailoRT's HW_ARCH__HAILO15H —, GINGER 104, LAVENDER 105, PLUTO 106).
pub fn hef_runs_on(hef_arch: i32, device_arch: &str) -> bool {
    let ok: &[i32] = match device_arch {
        "HAILO8" => &[1, 2, 3],
        "HAILO8L" => &[3],
        "HAILO10H" | "HAILO15H" => &[104, 105, 103, 4, 5],
        "HAILO15L" => &[6, 106],
        "HAILO15M" => &[4],
        _ => &[],
    };
    ok.contains(&hef_arch)
}

/// Open `target`'s HEF on its device: the simulated one for a HEF `synth-hef` wrote, the real
/// one otherwise. A HEF built for another architecture is an input error, as HailoRT's
/// HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE would be, never a regression.
pub fn open(target: &Target) -> Result<OpenDevice> {
    let path = target.spec.path()?;
    let what = path.display().to_string();
    let hef = Hef::read(path)?;
    let (mut device, made_from): (Box<dyn Device>, Option<String>) = match sim_spec(&hef, &what)? {
        Some(spec) => {
            let dev = SimDevice::from_hef(hef.clone(), spec, what.clone())?;
            let hash = dev.checkpoint.hash.clone();
            (Box::new(dev), Some(hash))
        }
        None => (open_device(path)?.0, None),
    };
    let facts = device.facts();
    if let Some(arch) = &facts.architecture {
        if !hef_runs_on(hef.hw_arch, arch) {
            return Err(Error::input(
                &what,
                format!(
                    "was built for {} (hw_arch {}), which a {arch} device does not run (HailoRT: \
                     HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE); compile the HEF for {arch}",
                    hw_arch_name(hef.hw_arch),
                    hef.hw_arch
                ),
            ));
        }
    }
    let driver = LlmDriver::open(device.as_mut(), &hef, &what)?;
    let backend = HefBackend::from_parts(&target.label, device, driver);
    Ok(OpenDevice { backend: Rc::new(RefCell::new(backend)), facts, made_from })
}

/// The open device as a probe's backend: every probe drives the same device.
pub struct Shared {
    pub device: Rc<RefCell<HefBackend>>,
    pub label: String,
}

impl Backend for Shared {
    fn name(&self) -> &str {
        &self.label
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.device.borrow().check()
    }

    fn capabilities(&self) -> Capabilities {
        self.device.borrow().capabilities()
    }

    fn run(&mut self, inputs: &InputSet, taps: &TapSelection) -> BackendRun {
        self.device.borrow_mut().run(inputs, taps)
    }

    fn run_local(&mut self, _: &InputSet, _: &TapSelection, _: &Capture) -> Option<BackendRun> {
        None
    }
}

/// The gate of one pair.
pub fn gate(device: &Rc<RefCell<HefBackend>>, inputs: &InputSet, spec: &GateSpec) -> Result<(GateResult, Spread)> {
    let r = repeatability(&mut device.borrow_mut(), inputs, spec.runs)?;
    let s = r.spread;
    let stable = s.cosine >= spec.min_cosine && s.argmax_agreement >= 1.0;
    let result = GateResult {
        runs: r.runs,
        max_abs: r.max_abs,
        worst_key: r.worst_key,
        cosine: s.cosine,
        sqnr_db: s.sqnr_db.is_finite().then_some(s.sqnr_db),
        kl: s.kl,
        argmax: s.argmax_agreement,
        stable,
    };
    Ok((result, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hailort_compatibility_table() {
        assert!(hef_runs_on(103, "HAILO10H") && hef_runs_on(5, "HAILO10H") && hef_runs_on(103, "HAILO15H"));
        assert!(!hef_runs_on(0, "HAILO10H") && !hef_runs_on(3, "HAILO10H"));
        assert!(hef_runs_on(3, "HAILO8") && !hef_runs_on(103, "HAILO8"));
        assert!(!hef_runs_on(103, "SOMETHING"));
    }
}
