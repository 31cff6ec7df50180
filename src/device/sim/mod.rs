//! The simulated device: opens a HEF written by `synth-hef` and runs it the way the chip
//! would see it — it decodes the frames the host sends (dequantizing the quantized inputs and
//! quantizing the float ones exactly as the runtime does), runs the emulator (the HEF's faults
//! and quantization) with a KV cache that behaves as HailoRT's ring (one ring per cache id,
//! shared by prefill and tbt, one read offset, writes right after the read window), and
//! returns float32 outputs through the HEF's output quant infos.
//!
//! `ring`: the cache ring; `model`: a configured group (frames, outputs, sim-h10's RPC rules).

mod core;
mod model;
mod ring;
mod trim;

use self::core::{Core, Faults, Noise};
use super::synth_hef::{Mistake, SimSpec, MAX_CALIBRATION_PROMPTS, MAX_CALIBRATION_TOKENS};
use super::{configured_streams, ConfiguredModel, Device, DeviceFacts, SimProfile};
use crate::error::{Error, Result};
use crate::fault::catalog;
use crate::fault::spec::FaultSpec;
use crate::fault::{Fault, OnDevice};
use crate::hef::Hef;
use crate::model::{Checkpoint, Decoder};
use crate::tap::Tap;
use model::SimModel;
use ring::Ring;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

pub struct SimDevice {
    /// Shared with the backend that drives it, and with explain's emulations of it.
    hef: Arc<Hef>,
    what: String,
    core: Rc<RefCell<Core>>,
    pub checkpoint: Checkpoint,
}

impl SimDevice {
    /// [`SimDevice::from_hef`] as the Hailo-10H RPC client (`SimProfile::SimH10`) or a local
    /// device.
    pub fn with_profile(
        hef: impl Into<Arc<Hef>>,
        spec: SimSpec,
        what: String,
        profile: SimProfile,
    ) -> Result<Self> {
        let dev = Self::from_hef(hef, spec, what)?;
        dev.core.borrow_mut().profile = profile;
        Ok(dev)
    }

    pub fn from_hef(hef: impl Into<Arc<Hef>>, spec: SimSpec, what: String) -> Result<Self> {
        let ckpt = spec.checkpoint.load()?;
        Self::on(hef.into(), spec, what, ckpt, (Vec::new(), None, false))
    }

    /// The frames and the ring of `hef` (any LLM HEF genai runs, simulated or compiled) on
    /// `ckpt`'s weights, computing `spec`'s faults through `quantized` (a frozen quantization:
    /// explain's expected one) in place of a quantization calibrated here: how `explain`
    /// emulates a candidate fault as a HEF computes it, padding rows, ring and all. `first`:
    /// faults whose hooks go ahead of all others (explain's instrument, which records or
    /// resumes the steps). `trim`: leave out the frame rows nothing reads (`trim`), which
    /// changes no bit of what the device returns.
    pub fn emulating(
        hef: Arc<Hef>,
        spec: SimSpec,
        what: String,
        ckpt: Checkpoint,
        (first, quantized, trim): (Faults, Box<dyn Fault>, bool),
    ) -> Result<Self> {
        Self::on(hef, spec, what, ckpt, (first, Some(quantized), trim))
    }

    fn on(
        hef: Arc<Hef>,
        spec: SimSpec,
        what: String,
        ckpt: Checkpoint,
        (first, frozen, trim): (Faults, Option<Box<dyn Fault>>, bool),
    ) -> Result<Self> {
        let c = &ckpt.config;
        // cache-layout is realized in the ring itself (how prefill writes), so the cache
        // buffers show it as a device's would; the other faults run in the emulator.
        let (layouts, mut specs): (Vec<FaultSpec>, Vec<FaultSpec>) =
            spec.faults.iter().cloned().partition(|f| catalog::on_device(f) == OnDevice::Ring);
        if spec.mistakes.contains(&Mistake::MissingLmHead) {
            specs.push(FaultSpec::parse("no-lm-head")?);
        }
        // The device gets its inputs already quantized by the runtime: the emulator must not
        // quantize them again.
        if spec.quant != "none" && frozen.is_none() {
            specs.push(crate::fault::spec::quantization(&spec.quant)?.with_param("inputs", "none"));
        }
        let mut faults = first;
        faults.extend(crate::fault::catalog::build_all(&specs, c)?);
        faults.extend(frozen);
        let mut model = Decoder::new(&ckpt)?;
        for f in &faults {
            f.transform_weights(&mut model)?;
        }
        let calibration = spec.calibration(c.vocab_size);
        check_calibration(&calibration.prompts, c.vocab_size, &what)?;
        let calib = calibration.inputs();
        for f in &faults {
            f.prepare(&model, &calib)?;
        }
        let tbt = match spec.tbt_faults.is_empty() {
            true => None,
            false => {
                let extra = crate::fault::catalog::build_all(&spec.tbt_faults, c)?;
                let mut m = Decoder::new(&ckpt)?;
                for f in faults.iter().chain(&extra) {
                    f.transform_weights(&mut m)?;
                }
                for f in &extra {
                    f.prepare(&m, &calib)?;
                }
                Some((m, extra))
            }
        };
        let (ring, layers) = Ring::of_hef(&hef, &spec, c, &layouts, &what)?;
        let exposed = exposed_taps(&spec, c.num_layers, &what)?;
        let noise = planted_noise(&spec, &what)?;
        Ok(SimDevice {
            hef,
            what,
            core: Rc::new(RefCell::new(Core {
                model,
                faults,
                tbt,
                base_run: None,
                ring,
                tbt_steps: 0,
                spec,
                profile: SimProfile::Sim,
                poisoned: None,
                noise,
                exposed,
                layers,
                trim,
            })),
            checkpoint: ckpt,
        })
    }
}

/// The calibration prompts a simulated HEF records are input: each id inside the vocabulary,
/// none empty, and a bounded total, named by the resource they come from.
fn check_calibration(prompts: &[Vec<u32>], vocab: usize, what: &str) -> Result<()> {
    let resource = || format!("{what} resource {} `calibration`", super::synth_hef::SIM_RESOURCE);
    let total = prompts.iter().map(Vec::len).fold(0usize, usize::saturating_add);
    if prompts.is_empty() || prompts.len() > MAX_CALIBRATION_PROMPTS || total > MAX_CALIBRATION_TOKENS {
        return Err(Error::input(
            resource(),
            format!(
                "{} prompts of {total} tokens: give 1 ..= {MAX_CALIBRATION_PROMPTS} prompts of at most \
                 {MAX_CALIBRATION_TOKENS} tokens",
                prompts.len()
            ),
        ));
    }
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(Error::input(resource(), format!("prompt {i} is empty")));
        }
        if let Some(&id) = p.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::input(
                resource(),
                format!(
                    "prompt {i} holds token id {id}, beyond the checkpoint's vocabulary of {vocab}: \
                     the HEF was calibrated for another checkpoint (write it again with synth-hef)"
                ),
            ));
        }
    }
    Ok(())
}

/// The taps a simulated HEF's graph also outputs (its resource's `expose`), each one a graph of
/// `layers` blocks can output.
fn exposed_taps(spec: &SimSpec, layers: usize, what: &str) -> Result<Vec<Tap>> {
    spec.expose
        .iter()
        .map(|t| {
            let tap = Tap::parse(t).filter(|&t| t.exposable() && t.layer().is_none_or(|l| l < layers));
            tap.ok_or_else(|| {
                Error::input(
                    format!("{what} resource {} `expose`", super::synth_hef::SIM_RESOURCE),
                    format!("`{t}` is not a tap this {layers}-layer graph can output"),
                )
            })
        })
        .collect()
}

/// The planted noise's stream ([`SimSpec::noise`]), seeded as the resource says.
fn planted_noise(spec: &SimSpec, what: &str) -> Result<Noise> {
    use rand::SeedableRng;
    let resource = format!("{what} resource {}", super::synth_hef::SIM_RESOURCE);
    let planted = |n: super::synth_hef::SimNoise| {
        let normal = rand_distr::Normal::new(0.0, n.std)
            .map_err(|e| Error::input(&resource, format!("noise: {e}")))?;
        Ok((rand_chacha::ChaCha8Rng::seed_from_u64(n.seed), normal))
    };
    spec.noise.map(planted).transpose()
}

impl Device for SimDevice {
    fn describe(&self) -> String {
        let s = self.core.borrow();
        let mut faults = if s.spec.faults.is_empty() {
            "no faults".to_string()
        } else {
            crate::fault::spec::join(&s.spec.faults, ", ")
        };
        if !s.spec.tbt_faults.is_empty() {
            faults += &format!("; tbt group only: {}", crate::fault::spec::join(&s.spec.tbt_faults, ", "));
        }
        let profile = match s.profile {
            SimProfile::Sim => "simulated device",
            SimProfile::SimH10 => "simulated Hailo-10H (RPC client limits)",
        };
        format!("{profile} for {} (quant {}, {faults})", self.what, s.spec.quant)
    }

    fn facts(&self) -> DeviceFacts {
        let s = self.core.borrow();
        let mut about =
            format!("hefprobe {} simulated Hailo-10H, quant {}", env!("CARGO_PKG_VERSION"), s.spec.quant);
        if !s.spec.faults.is_empty() {
            about += &format!(", faults {}", crate::fault::spec::join(&s.spec.faults, " "));
        }
        if !s.spec.tbt_faults.is_empty() {
            about += &format!(", tbt-group faults {}", crate::fault::spec::join(&s.spec.tbt_faults, " "));
        }
        if let Some(n) = s.spec.noise {
            about += &format!(", planted noise std {}", n.std);
        }
        DeviceFacts {
            // `sim` or `sim-h10` (the RPC client's limits).
            kind: s.profile.name().into(),
            // The simulator executes HEFs for the Hailo-10H (hw_arch HAILO1XH, as synth-hef writes).
            architecture: Some("HAILO10H".into()),
            device_id: Some("simulated".into()),
            simulator: Some(about),
            ..DeviceFacts::default()
        }
    }

    fn configure(&mut self, group: &str, float_inputs: &[String]) -> Result<Box<dyn ConfiguredModel>> {
        let g = self.hef.group(group).ok_or_else(|| {
            Error::Device(format!("create_infer_model: {} has no network group `{group}`", self.what))
        })?;
        let (inputs, outputs) = configured_streams(g, float_inputs)?;
        let role = g.role();
        Ok(Box::new(SimModel { core: self.core.clone(), group: g.clone(), inputs, outputs, role }))
    }
}
