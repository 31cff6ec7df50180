//! What a simulated device holds across runs, shared by its configured groups: the models
//! (prefill's and a tbt graph's own), the cache ring, the planted noise, sim-h10's poisoned state.

use super::ring::Ring;
use crate::device::synth_hef::SimSpec;
use crate::device::SimProfile;
use crate::fault::Fault;
use crate::model::Decoder;
use crate::tap::Tap;

/// Faults whose hooks go ahead of the device's own (explain's instrument).
pub(super) type Faults = Vec<Box<dyn Fault>>;

pub(super) type Noise = Option<(rand_chacha::ChaCha8Rng, rand_distr::Normal<f32>)>;

pub(super) struct Core {
    pub(super) model: Decoder,
    pub(super) faults: Vec<Box<dyn Fault>>,
    /// The tbt group's own model and extra faults, when the HEF plants some there
    /// (`SimSpec::tbt_faults`): a tbt graph compiled otherwise than prefill.
    pub(super) tbt: Option<(Decoder, Faults)>,
    /// The last base-scope frame's real rows and its step, to tell a conversation's next step
    /// (the same rows and one more) from a new conversation.
    pub(super) base_run: Option<(Vec<u8>, usize)>,
    pub(super) ring: Ring,
    pub(super) tbt_steps: usize,
    pub(super) spec: SimSpec,
    pub(super) profile: SimProfile,
    /// sim-h10: the first failed run, after which every call on the configured models fails
    /// (one server-side shutdown takes both groups' rings with it in this model).
    pub(super) poisoned: Option<String>,
    /// The planted noise's stream (SimSpec::noise), continued across runs.
    pub(super) noise: Noise,
    /// The taps the graph also outputs (SimSpec::expose).
    pub(super) exposed: Vec<Tap>,
    /// The blocks the graph runs, first and last (SimSpec::layers).
    pub(super) layers: (usize, usize),
    /// Leave out the frame rows nothing reads where every bit of the rest stays (`trim`):
    /// explain's emulations, with its shortcuts on.
    pub(super) trim: bool,
}
