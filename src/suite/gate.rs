//! Device targets: each HEF is opened once per suite run (`backend::hef::open_hef`: its facts
//! read, its architecture checked) and shared by every probe; before a pair is compared, its
//! InputSet runs `[gate] runs` times on the device (`explain::diag::repeatability`). A device
//! that disagrees with itself — logits cosine between runs below `[gate] min_cosine`, or
//! another argmax for the same inputs — is "unstable": its comparisons could show noise as
//! drift, so the pair is not compared at all, and it is never reported as a regression. A
//! stable device's spread widens the pair's noise band.

use super::result::GateResult;
use super::spec::{GateSpec, Target};
use crate::backend::hef::{open_hef, HefBackend};
use crate::backend::{Backend, Capabilities, Ran};
use crate::capture::{Store, TapSink};
use crate::diagnose::repeatability;
pub use crate::diagnose::Spread;
use crate::error::Result;
use crate::inputs::InputSet;
use crate::tap::TapSelection;
use std::cell::RefCell;
use std::rc::Rc;

/// A HEF target, open on its device for the whole run.
pub type OpenDevice = Rc<RefCell<HefBackend>>;

/// Open `target`'s HEF on its device: the simulated one for a HEF `synth-hef` wrote, the real
/// one otherwise. A HEF built for another architecture is an input error, never a regression.
pub fn open(target: &Target) -> Result<OpenDevice> {
    let spec = &target.spec;
    let mut hef = open_hef(&target.label, spec.path()?, spec.device, spec.group.as_deref())?;
    hef.declared = target.spec.quant.clone();
    if let Some(m) = &target.spec.map {
        hef.set_output_map(m)?;
    }
    Ok(Rc::new(RefCell::new(hef)))
}

/// The open device as a probe's backend: every probe drives the same device.
pub struct Shared {
    pub device: OpenDevice,
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

    fn reference_window(&self, inputs: &InputSet) -> Option<(usize, String)> {
        self.device.borrow().reference_window(inputs)
    }

    fn follow_inputs(&self, inputs: &InputSet) -> Option<(InputSet, String)> {
        self.device.borrow().follow_inputs(inputs)
    }

    fn expected(
        &mut self,
        ckpt: &crate::model::Checkpoint,
    ) -> Result<Option<std::sync::Arc<crate::fault::expected::Expected>>> {
        self.device.borrow_mut().expected(ckpt).map(Some)
    }

    fn notes(&self) -> Vec<String> {
        vec![self.device.borrow().outputs_note()]
    }

    fn run(
        &mut self,
        inputs: &InputSet,
        taps: &TapSelection,
        feed: Option<&dyn Store>,
        sink: &mut dyn TapSink,
    ) -> Ran {
        self.device.borrow_mut().run(inputs, taps, feed, sink)
    }
}

/// The gate of one pair: the device's repeatability on the pair's inputs
/// (`explain::diag::repeatability`), stable when run 1 and every later run agree on the
/// argmax and within `[gate] min_cosine`.
pub fn gate(device: &OpenDevice, inputs: &InputSet, spec: &GateSpec) -> Result<(GateResult, Spread)> {
    // Run as the pair's comparison runs it: chunked as the HEF is fed.
    let followed = device.borrow().follow_inputs(inputs);
    let inputs = followed.as_ref().map_or(inputs, |f| &f.0);
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
