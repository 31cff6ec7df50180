//! Stage 2's output: every backend's captures (memory or files, read through [`Store`]), its
//! own references and expected quantization, what it reported about itself.

use crate::backend::{BackendSpec, Capabilities};
use crate::capture::Store;
use crate::error::Error;
use crate::fault::expected::Expected;
use crate::inputs::InputSet;
use crate::probe::spill::SpillDir;
use crate::report::{BackendStatus, InputInfo};
use crate::tap::TapSelection;
use std::sync::Arc;

/// A capture's file name: `NAME.npz` with anything but letters, digits, `-` and `.` as `_`.
pub(super) fn capture_file(name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    format!("{safe}.npz")
}

/// One backend's captures: the cumulative run and, where it takes overrides, the local view.
pub struct BackendOutput {
    pub spec: BackendSpec,
    pub label: String,
    pub capabilities: Capabilities,
    pub status: BackendStatus,
    pub capture: Box<dyn Store>,
    pub local: Option<(TapSelection, Box<dyn Store>)>,
    pub error: Option<Error>,
    /// The float reference this backend is compared with when it needs its own
    /// ([`Backend::reference_window`]): its label, capture, and the note that says why.
    pub reference: Option<(String, Box<dyn Store>, String)>,
    /// What the backend computes when nothing is wrong ([`Backend::expected`]): the backend
    /// is judged on its excess over it.
    pub expected: Option<ExpectedRun>,
    /// Where its figures come from ([`Backend::notes`]).
    pub notes: Vec<String>,
    /// The device it ran on ([`Backend::device`]).
    pub device: Option<crate::device::DeviceFacts>,
    /// The inputs it ran when not the probe's ([`Backend::follow_inputs`]).
    pub inputs: Option<InputSet>,
    /// Its lm_head shard widths ([`Backend::logits_shards`]).
    pub shards: Option<Vec<usize>>,
    /// What a served model returned ([`Backend::served`]).
    pub served: Option<crate::backend::serve::Served>,
}

/// A backend's expected quantization, emulated twice: the expected draw, and a second draw
/// ([`Realization`]) whose distance from the first is the spread the backend's own draw may
/// show.
pub struct ExpectedRun {
    pub quant: Arc<Expected>,
    /// How explain emulates a candidate as the backend computes it ([`Backend::emulation`]).
    pub emulation: Option<crate::backend::Emulation>,
    pub capture: Box<dyn Store>,
    pub realization: Box<dyn Store>,
}

impl BackendOutput {
    /// The float reference of this backend, and its label.
    pub fn float_reference<'a>(&'a self, runs: &'a Runs) -> (&'a str, &'a dyn Store) {
        match &self.reference {
            Some((l, c, _)) => (l, c.as_ref()),
            None => ("reference", runs.reference.as_ref()),
        }
    }

    /// What explain takes as clean for this backend, and its label: its expected emulation,
    /// else its float reference.
    pub fn clean<'a>(&'a self, runs: &'a Runs) -> (&'a str, &'a dyn Store) {
        match &self.expected {
            Some(e) => ("expected", e.capture.as_ref()),
            None => self.float_reference(runs),
        }
    }
}

/// Stage 2's output.
pub struct Runs {
    pub reference: Box<dyn Store>,
    /// What the reference fed (greedy decoding resolved) and when each phase ran.
    pub inputs: InputInfo,
    pub backends: Vec<BackendOutput>,
    /// The folders of a spilled run; the temporary one goes when this is dropped.
    pub spill: Option<SpillDir>,
}

impl Runs {
    pub fn backend(&self, label: &str) -> Option<&BackendOutput> {
        self.backends.iter().find(|b| b.label == label)
    }

    /// Every capture of the run: the reference, each backend's own reference, capture and
    /// local view.
    pub fn stores(&self) -> impl Iterator<Item = &dyn Store> {
        let backends = self.backends.iter();
        let expected = backends.clone().flat_map(|b| &b.expected);
        std::iter::once(self.reference.as_ref())
            .chain(backends.clone().filter_map(|b| b.reference.as_ref().map(|(_, c, _)| c.as_ref())))
            .chain(expected.flat_map(|e| [e.capture.as_ref(), e.realization.as_ref()]))
            .chain(backends.clone().map(|b| b.capture.as_ref()))
            .chain(backends.filter_map(|b| b.local.as_ref().map(|(_, c)| c.as_ref())))
    }
}
