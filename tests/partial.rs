//! A run that fails half-way keeps what it finished: the capture holds every phase before the
//! failure, and the streamed npz is closed and readable.

mod common;

use hefprobe::backend::decoder::DecoderBackend;
use hefprobe::capture::NpzSink;
use hefprobe::error::Error;
use hefprobe::fault::Fault;
use hefprobe::inputs::{DecodeSpec, InputSet};
use hefprobe::model::hooks::{Hooks, StepCtx};
use hefprobe::model::run::{run_inputs, RunRecord};
use hefprobe::model::synth::SynthSpec;
use hefprobe::model::Decoder;
use hefprobe::tap::{Phase, Tap, TapSelection};

/// Fails when the run reaches `at`.
struct FailAt(Phase, hefprobe::fault::spec::FaultSpec);

impl FailAt {
    fn new(at: Phase) -> Self {
        FailAt(at, hefprobe::fault::spec::FaultSpec::parse(&format!("fail-at:{at}")).unwrap())
    }
}

impl Fault for FailAt {
    fn spec(&self) -> &hefprobe::fault::spec::FaultSpec {
        &self.1
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(FailHooks(self.0))
    }
}

struct FailHooks(Phase);

impl Hooks for FailHooks {
    fn edit(
        &mut self,
        ctx: &StepCtx,
        tap: Tap,
        t: candle_core::Tensor,
    ) -> hefprobe::Result<candle_core::Tensor> {
        if ctx.phase == self.0 && tap == Tap::Embed {
            return Err(Error::Device(format!("simulated failure at {}", ctx.phase)));
        }
        Ok(t)
    }
}

fn setup() -> (hefprobe::model::Checkpoint, InputSet) {
    let mut s = SynthSpec::preset("tinystories", 1).unwrap();
    (s.preset, s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.vocab) =
        (None, 32, 1, 2, 2, None, Some(64));
    let mut inputs = InputSet::new(vec![1, 2, 3, 4]);
    inputs.decode = DecodeSpec::Forced(vec![5, 6, 7]);
    (s.build().unwrap(), inputs)
}

#[test]
fn backend_keeps_the_phases_before_a_failure() {
    let (ckpt, inputs) = setup();
    let mut b =
        DecoderBackend::with_faults("x", &ckpt, vec![Box::new(FailAt::new(Phase::Decode(1)))]).unwrap();
    let run = hefprobe::backend::collect(&mut b, &inputs, &TapSelection::all(), None);
    let e = run.error.expect("the run fails").to_string();
    assert!(e.contains("simulated failure at decode.1"), "{e}");
    assert_eq!(run.capture.phases(), vec![Phase::Prefill, Phase::Decode(0)]);
    assert_eq!(run.record.phases.len(), 2);
}

#[test]
fn streamed_capture_is_readable_after_a_failure() {
    let (ckpt, inputs) = setup();
    let model = Decoder::new(&ckpt).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("partial.npz");
    let mut sink = NpzSink::create(&path, TapSelection::all()).unwrap();
    let fault = FailAt::new(Phase::Decode(2));
    let mut hooks = fault.hooks();
    let result = run_inputs(&model, &inputs, &mut sink, hooks.as_mut(), &mut RunRecord::default());
    assert!(result.is_err());
    sink.finish().unwrap();
    let cap = common::read_npz(&path).unwrap();
    assert_eq!(cap.phases(), vec![Phase::Prefill, Phase::Decode(0), Phase::Decode(1)]);
    assert!(cap.at(Phase::Decode(1), Tap::Logits).is_some());
}
