//! Device targets: each HEF is opened once per suite run (its facts read, its architecture
//! checked) and shared by every probe; before a pair is compared, its InputSet runs
//! `[gate] runs` times on the device (the loop of `explain::diag::repeatability`, also reading
//! each run's spread in a comparison's own figures). A device that disagrees
//! with itself — logits cosine between runs below `[gate] min_cosine`, or another argmax for
//! the same inputs — is "unstable": its comparisons could show noise as drift, so the pair is
//! not compared at all, and it is never reported as a regression. A stable device's spread
//! widens the pair's noise band.

use super::result::GateResult;
use super::spec::{GateSpec, Target};
use crate::backend::hef::{open_device, HefBackend};
use crate::backend::{Backend, BackendRun, Capabilities};
use crate::capture::Capture;
use crate::compare::View;
use crate::device::driver::LlmDriver;
use crate::device::sim::SimDevice;
use crate::device::synth_hef::sim_spec;
use crate::device::{Device, DeviceFacts};
use crate::error::{Error, Result};
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
    let profile = target.spec.sim_profile()?;
    let (mut device, made_from): (Box<dyn Device>, Option<String>) = match sim_spec(&hef, &what)? {
        Some(spec) => {
            let dev = SimDevice::with_profile(hef.clone(), spec, what.clone(), profile.unwrap_or_default())?;
            let hash = dev.checkpoint.hash.clone();
            (Box::new(dev), Some(hash))
        }
        None => (open_device(path, profile)?.0, None),
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

/// Run 1 against every later run in a comparison's own figures, worst over phases and runs:
/// what the device's own noise alone does to a figure (identical runs: cosine 1, SQNR inf,
/// KL 0, argmax agreement 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub cosine: f64,
    pub sqnr_db: f64,
    pub kl: f64,
    pub argmax_agreement: f64,
}

impl Default for Spread {
    fn default() -> Self {
        Spread { cosine: 1.0, sqnr_db: f64::INFINITY, kl: 0.0, argmax_agreement: 1.0 }
    }
}

impl Spread {
    fn widen(&mut self, first: &Capture, later: &Capture) {
        let thresholds = crate::compare::thresholds::Thresholds::default();
        let pair = crate::compare::compare(first, later, ("run 1", "run k"), View::Cumulative, &thresholds);
        for row in &pair.rows {
            if let Some(m) = &row.metrics {
                self.cosine = self.cosine.min(m.cosine);
                self.sqnr_db = self.sqnr_db.min(m.sqnr_db);
            }
            if let Some(l) = &row.logits {
                self.kl = self.kl.max(l.kl_mean);
                self.argmax_agreement = self.argmax_agreement.min(l.argmax_agreement);
            }
        }
    }
}

/// The gate of one pair: `explain::diag::repeatability`'s runs (same inputs, run 1 against
/// each later run, largest |Δ| of any logit), kept here rather than in explain/diag.rs because
/// the suite also needs the spread of every figure, which `diagnose` does not report.
pub fn gate(
    device: &Rc<RefCell<HefBackend>>,
    inputs: &InputSet,
    spec: &GateSpec,
) -> Result<(GateResult, Spread)> {
    let mut backend = device.borrow_mut();
    let runs = spec.runs.max(2);
    let mut first: Option<Capture> = None;
    let (mut max_abs, mut worst_key) = (0f64, None);
    let mut s = Spread::default();
    for _ in 0..runs {
        let mut cap = Capture::default();
        backend.drive(inputs, &mut cap, &mut Default::default())?;
        match &first {
            None => first = Some(cap),
            Some(f) => {
                for k in f.keys() {
                    if let (Some(a), Some(b)) = (f.get_key(k), cap.get_key(k)) {
                        let d = a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs() as f64).fold(0.0, f64::max);
                        if d > max_abs {
                            (max_abs, worst_key) = (d, Some(k.to_string()));
                        }
                    }
                }
                s.widen(f, &cap);
            }
        }
    }
    let stable = s.cosine >= spec.min_cosine && s.argmax_agreement >= 1.0;
    let result = GateResult {
        runs,
        max_abs,
        worst_key,
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
