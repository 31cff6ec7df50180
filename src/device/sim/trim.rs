//! Which rows of a frame explain's emulation of a HEF computes. genai pads a short prompt's
//! prefill frame with rows whose mask is all on (`frames::mask_frame`): on SmolLM2's HEF, 87
//! of a 9-token prompt's 96 rows, each attending over the whole ring. The graph outputs the
//! frame's last row, and no row the output needs reads what a padding row writes, so the
//! padding rows are left out where that keeps every bit of the rest: whole leading blocks of
//! rows (the attention kernels' own row blocks, `attention::blocks_alike`, every product on the
//! kernel the whole frame takes, `kernels::rows_alike`), then, when the rest are one block, its
//! leading rows not needed while the block keeps its kernel and the last key its rows may see
//! (`attention::block_tail_alike`); and the final norm and lm_head on the fewest last rows that
//! take the kernel the whole frame takes.
//!
//! One bound is not the mask's: probs·v runs up to the last key to which any row of the block
//! gives a probability that is not 0. A padding row kept or left out changes that only when
//! every needed row of the block gives the block's last key a probability that underflows to 0
//! (in genai's frames that key is the last row's own slot); explain's `--exhaustive` computes
//! every row.

use crate::error::Result;
use crate::model::attention::{block_tail_alike, blocks_alike};
use crate::model::config::ModelConfig;
use crate::model::decoder::FrameInputs;
use crate::model::kernels::rows_alike;
use candle_core::Tensor;

/// The rows one step computes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    /// Per frame row: whether the output needs it (its own row, or its cache entry through a
    /// needed row's mask). The ring marks the entries of the others as not computed.
    pub live: Vec<bool>,
    /// Leading rows left out, none of them live.
    pub skip: usize,
    /// Rows the final norm and lm_head compute (the last ones); None: every row computed.
    pub head_rows: Option<usize>,
}

impl Plan {
    /// Every row computed, every row needed.
    pub fn whole(t: usize) -> Plan {
        Plan { live: vec![true; t], skip: 0, head_rows: None }
    }

    /// The plan for a frame whose mask is `allowed` ([T][S], the frame writing the last T of the
    /// S slots it reads, `ring::RingStep`) and whose output is its last row, on `c`'s shapes.
    pub fn of(allowed: &[Vec<bool>], c: &ModelConfig) -> Plan {
        let t = allowed.len();
        let Some(live) = live_rows(allowed) else { return Plan::whole(t) };
        let widths =
            [c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.hidden_size, c.intermediate_size];
        let first_live = live.iter().position(|&l| l).unwrap_or(t);
        let blocks = (1..=first_live)
            .rev()
            .find(|&s| blocks_alike(t, t - s) && rows_alike(t, t - s, &widths))
            .unwrap_or(0);
        // Rows left in one block: its leading rows not needed go too, where the rest keep the
        // block's kernels and its key range.
        let reach = |from: usize| {
            allowed[from..].iter().map(|r| r.iter().rposition(|&a| a).map_or(0, |j| j + 1)).max()
        };
        let block_reach = reach(blocks);
        let skip = (blocks..=first_live)
            .rev()
            .find(|&s| {
                block_tail_alike(t - blocks, t - s)
                    && rows_alike(t, t - s, &widths)
                    && reach(s) == block_reach
            })
            .unwrap_or(blocks);
        let head = (1..t - skip).find(|&r| rows_alike(t, r, &[c.vocab_size]));
        Plan { live, skip, head_rows: head }
    }

    /// The frame's embeddings [T, hidden], and its mask and RoPE tables, cut to the rows this
    /// plan computes.
    pub fn cut(&self, embeds: Tensor, frame: &mut FrameInputs) -> Result<Tensor> {
        frame.skip = self.skip;
        frame.head_rows = self.head_rows;
        if self.skip == 0 {
            return Ok(embeds);
        }
        let last = |x: &Tensor, axis: usize| -> Result<Tensor> {
            let t = x.dim(axis)?;
            Ok(x.narrow(axis, self.skip, t - self.skip)?.contiguous()?)
        };
        frame.allowed.drain(..self.skip);
        frame.rope_q = (last(&frame.rope_q.0, 1)?, last(&frame.rope_q.1, 1)?);
        frame.rope_k = (last(&frame.rope_k.0, 1)?, last(&frame.rope_k.1, 1)?);
        last(&embeds, 0)
    }
}

/// The frame rows the last row needs, through the mask: row r needs row q when it may read the
/// slot q writes (column S − T + q). None when the frame has no rows or more rows than slots.
fn live_rows(allowed: &[Vec<bool>]) -> Option<Vec<bool>> {
    let t = allowed.len();
    let s = allowed.first().map_or(0, Vec::len);
    let own = s.checked_sub(t).filter(|_| t > 0)?;
    let mut live = vec![false; t];
    live[t - 1] = true;
    let mut todo = vec![t - 1];
    while let Some(r) = todo.pop() {
        for (q, &seen) in allowed[r][own..].iter().enumerate() {
            if seen && !live[q] {
                live[q] = true;
                todo.push(q);
            }
        }
    }
    Some(live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::frames::mask_frame;
    use crate::tap::{LayerTap, Tap};

    /// Block 0 of a genai mask frame as the simulated device reads it.
    fn allowed(t: usize, usage: usize, kv: usize) -> Vec<Vec<bool>> {
        mask_frame(t, usage, kv, 1, 1).chunks(kv).map(|r| r.iter().map(|&b| b == 1).collect()).collect()
    }

    fn smollm2() -> ModelConfig {
        crate::model::synth::preset_config("smollm2-135m").unwrap()
    }

    #[test]
    fn padding_rows_are_not_needed_and_prompt_rows_are() {
        // 96-row frame, 9 prompt tokens, a ring of 2048: rows 87.. are the prompt's.
        let live = live_rows(&allowed(96, 9, 2048)).unwrap();
        assert_eq!(live.iter().position(|&l| l), Some(87));
        assert!(live[87..].iter().all(|&l| l));
        // A full frame (no padding): every row, through the causal mask.
        assert!(live_rows(&allowed(96, 200, 2048)).unwrap().iter().all(|&l| l));
        // A row that sees everything (an all-on padding row taken as the output) needs every row.
        let mut a = allowed(8, 3, 16);
        a[7].fill(true);
        assert!(live_rows(&a).unwrap().iter().all(|&l| l));
        assert_eq!(live_rows(&allowed(4, 2, 2)), None, "more rows than slots");
    }

    /// Rows and last-row bits of each value [`Seen`] records.
    type Record = std::sync::Arc<std::sync::Mutex<Vec<(usize, Vec<u32>)>>>;

    /// Records the last row of every block's output and of the logits as computed (before the
    /// quantization rounds them), which output frames would hide.
    struct Seen(crate::fault::spec::FaultSpec, Record);

    impl crate::fault::Fault for Seen {
        fn spec(&self) -> &crate::fault::spec::FaultSpec {
            &self.0
        }
        fn hooks(&self) -> Box<dyn crate::model::hooks::Hooks + '_> {
            Box::new(SeenHooks(self.1.clone()))
        }
    }

    struct SeenHooks(Record);

    impl crate::model::hooks::Hooks for SeenHooks {
        fn edit(&mut self, _: &crate::model::hooks::StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
            if matches!(tap, Tap::Logits | Tap::Layer(_, LayerTap::Out)) {
                let last: Vec<f32> = t.get(t.dim(0)? - 1)?.to_vec1()?;
                self.0.lock().unwrap().push((t.dim(0)?, last.iter().map(|x| x.to_bits()).collect()));
            }
            Ok(t)
        }
        fn needs_explicit_attention(&self, _layer: usize) -> bool {
            false
        }
        fn rows_apart(&self) -> bool {
            true
        }
    }

    /// One emulation of a 5-token prompt and two tbt steps on a synthesized HEF (96-row
    /// frames) computing `fault`: the last row of each block's output and of the logits, bit
    /// for bit, and the ring entries left stale.
    fn emulate(fault: &str, trim: bool) -> (Vec<(usize, Vec<u32>)>, usize) {
        use crate::device::driver::LlmDriver;
        use crate::device::synth_hef::{sim_spec, synth_hef, SimCheckpoint, SynthHefOptions};
        use crate::fault::spec::FaultSpec;
        // Every product of 32 rows on gemm's main kernels, as of 96 (every width ≥ 9).
        let mut s = crate::model::synth::SynthSpec::preset("tinystories", 5).unwrap();
        (s.preset, s.arch, s.hidden, s.layers, s.heads, s.kv_heads) =
            (None, crate::model::Arch::Llama, 64, 2, 4, 2);
        (s.head_dim, s.intermediate, s.vocab) = (None, Some(128), Some(300));
        let ckpt = s.build().unwrap();
        let opts = SynthHefOptions { kv_cache_size: 256, ..Default::default() };
        let hef = std::sync::Arc::new(synth_hef(&ckpt, SimCheckpoint::Synth(s), &opts).unwrap());
        let mut spec = sim_spec(&hef, "t").unwrap().unwrap();
        spec.faults = vec![FaultSpec::parse(fault).unwrap()];
        let quant = FaultSpec::parse("quant:w8,inputs=none").unwrap();
        let quant = crate::fault::catalog::build_all(&[quant], &ckpt.config).unwrap().remove(0);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let first: Vec<Box<dyn crate::fault::Fault>> =
            vec![Box::new(Seen(FaultSpec::parse("seen").unwrap(), seen.clone()))];
        let mut dev =
            super::super::SimDevice::emulating(hef.clone(), spec, "t".into(), ckpt, (first, quant, trim))
                .unwrap();
        let mut d = LlmDriver::open(&mut dev, &hef, "t").unwrap();
        d.new_conversation().unwrap();
        d.prefill(&[5, 9, 13, 2, 7]).unwrap();
        d.step(11).unwrap();
        d.step(12).unwrap();
        let stale = dev.core.borrow().ring.stale.iter().filter(|&&s| s).count();
        let seen = seen.lock().unwrap().clone();
        (seen, stale)
    }

    #[test]
    fn leaving_padding_rows_out_changes_no_bit_the_device_returns() {
        // The tiny model's 32-wide k/v projections take gemm's main kernels from 9 rows.
        for (fault, rows) in [("shared-softmax@layers=1", 9), ("mask-repeat@layers=1", 96)] {
            let (whole, none) = emulate(fault, false);
            let (trimmed, stale) = emulate(fault, true);
            assert_eq!(none, 0, "{fault}: nothing is left out unless asked");
            assert_eq!(whole.len(), 3 * 3, "{fault}: 2 blocks and the logits, 3 steps");
            assert_eq!((whole[0].0, trimmed[0].0), (96, rows), "{fault}: prefill rows computed");
            let bits = |v: &[(usize, Vec<u32>)]| v.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>();
            assert!(bits(&whole) == bits(&trimmed), "{fault}: leaving rows out changed a bit");
            // 91 padding rows, none needed; mask-repeat mixes rows: all kept.
            assert_eq!(stale, if rows < 96 { 91 } else { 0 }, "{fault}");
        }
    }

    #[test]
    fn padding_rows_go_in_whole_blocks_then_the_last_blocks_and_lm_head_takes_the_fewest_alike_rows() {
        let c = smollm2();
        let p = Plan::of(&allowed(96, 9, 2048), &c);
        assert_eq!(p.skip, 87, "two whole blocks of 32 padding rows, then the last block's 23");
        let (head, v) = (p.head_rows.unwrap(), [c.vocab_size]);
        assert!(head < 9 && rows_alike(96, head, &v) && !rows_alike(96, head - 1, &v));
        // 3 prompt tokens: the last block keeps 8 rows, the blocked kernel's least.
        assert_eq!(Plan::of(&allowed(96, 3, 2048), &c).skip, 88);
        // 40 prompt tokens: rows 56.. are needed, so only the first block goes (two are left).
        assert_eq!(Plan::of(&allowed(96, 40, 2048), &c).skip, 32);
        // 70: none.
        assert_eq!(Plan::of(&allowed(96, 70, 2048), &c).skip, 0);
        // A frame not a multiple of the block: whole blocks go; the rest are two blocks.
        assert_eq!(Plan::of(&allowed(100, 9, 2048), &c).skip, 64);
        // The last row not seeing its own slot: a padding row stays for the block's key range.
        let mut a = allowed(96, 9, 2048);
        a[95][2047] = false;
        assert_eq!(Plan::of(&a, &c).skip, 86);
        // A tbt frame of one row: nothing to leave out, and lm_head computes its one row.
        assert_eq!(Plan::of(&allowed(1, 12, 2048), &c), Plan::whole(1));
    }
}
