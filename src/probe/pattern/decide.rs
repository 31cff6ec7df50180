//! The experiment that decides between the hypotheses a record leaves standing: the fewest
//! checkpoint shapes on which their predictions differ. A width fault's prediction at a hidden
//! size follows from its definition (a bit-exact no-op when the row fits: `judge::noop_at`); a
//! fault that does not depend on width acts at every size. Shapes are 6 layers, kv_heads = heads,
//! at hidden sizes the record does not hold yet (a size on record is already answered).

use super::judge::{noop_at, Hypothesis, Judged, Verdict};
use super::record::{Outcome, Pattern};
use crate::fault::spec::FaultSpec;
use serde::Serialize;

/// Hidden sizes tried (multiples of 8 with an even head dim of 64, or 40 for 520).
pub const CANDIDATES: [usize; 8] = [320, 384, 448, 512, 520, 576, 640, 768];

#[derive(Debug, Clone, Default, Serialize)]
pub struct Experiment {
    /// The hypotheses compared (labels).
    pub compared: Vec<String>,
    /// Candidate hidden sizes left out because the record already holds them.
    pub on_record: Vec<usize>,
    /// Why these: the survivors, or the width hypotheses consistent with the coherent record.
    pub basis: String,
    /// Chosen hidden sizes, each with the hypotheses predicted to act there.
    pub shapes: Vec<Shape>,
    /// Pairs no candidate shape separates.
    pub inseparable: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Shape {
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    /// Hypotheses predicted to act on this shape (change the logits `run` compares; the others
    /// are bit-exact no-ops there by definition).
    pub acting: Vec<String>,
    pub commands: Vec<String>,
}

/// Whether `spec` acts at `hidden` (Some(false): a no-op there by definition); None for a fault
/// that does not depend on width (it acts everywhere).
fn acts(spec: &FaultSpec, hidden: usize) -> bool {
    noop_at(spec, hidden) != Some(true)
}

fn heads_of(hidden: usize) -> usize {
    if hidden.is_multiple_of(64) {
        hidden / 64
    } else {
        hidden / 40
    }
}

/// The hypotheses to separate: those that reproduce the whole record, and the width hypotheses
/// that leave every coherent observation clean (the candidates for a threshold the record places
/// between its shapes, whether or not they collapsed the given checkpoint).
fn compared(p: &Pattern, judged: &[Judged]) -> (Vec<FaultSpec>, String) {
    let spec = |j: &Judged| match &j.hypothesis {
        Hypothesis::Fault(s) => FaultSpec::parse(s).ok(),
        _ => None,
    };
    let coherent_ok = |j: &Judged| {
        p.observations
            .iter()
            .zip(&j.results)
            .all(|(o, r)| o.outcome != Outcome::Coherent || r.status != super::judge::Status::Missed)
    };
    let specs: Vec<FaultSpec> = judged
        .iter()
        .filter(|j| {
            j.verdict == Verdict::Reproduces
                || coherent_ok(j) && spec(j).is_some_and(|s| noop_at(&s, 1).is_some())
        })
        .filter_map(spec)
        .collect();
    let full = judged.iter().filter(|j| j.verdict == Verdict::Reproduces).count();
    (
        specs,
        format!(
            "the {full} hypothesis(es) that reproduce the whole record, and the width hypotheses that leave every coherent \
             observation clean: the candidates for a threshold the record places between its shapes"
        ),
    )
}

/// The fewest candidate shapes separating the most pairs (greedy set cover), with the commands.
pub fn experiment(p: &Pattern, judged: &[Judged]) -> Experiment {
    let (specs, basis) = compared(p, judged);
    let on_record: Vec<usize> =
        CANDIDATES.into_iter().filter(|h| p.observations.iter().any(|o| o.hidden == *h)).collect();
    let candidates: Vec<usize> = CANDIDATES.into_iter().filter(|h| !on_record.contains(h)).collect();
    let sig = |s: &FaultSpec| candidates.iter().map(|&h| acts(s, h)).collect::<Vec<bool>>();
    let n = specs.len();
    let mut open: Vec<(usize, usize)> = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b))).collect();
    let mut inseparable = Vec::new();
    open.retain(|&(a, b)| {
        let differ = sig(&specs[a]) != sig(&specs[b]);
        if !differ {
            inseparable.push((specs[a].to_string(), specs[b].to_string()));
        }
        differ
    });
    let mut chosen: Vec<usize> = Vec::new();
    while !open.is_empty() {
        let splits = |c: usize| {
            open.iter()
                .filter(|&&(a, b)| acts(&specs[a], candidates[c]) != acts(&specs[b], candidates[c]))
                .count()
        };
        let Some(best) = (0..candidates.len()).max_by_key(|&c| (splits(c), std::cmp::Reverse(c))) else {
            break;
        };
        if splits(best) == 0 {
            break;
        }
        open.retain(|&(a, b)| acts(&specs[a], candidates[best]) == acts(&specs[b], candidates[best]));
        chosen.push(best);
    }
    chosen.sort_unstable();
    let shapes = chosen
        .into_iter()
        .map(|c| {
            let hidden = candidates[c];
            let acting = specs.iter().filter(|s| acts(s, hidden)).map(ToString::to_string).collect();
            Shape { hidden, heads: heads_of(hidden), layers: 6, acting, commands: commands(hidden) }
        })
        .collect();
    Experiment {
        compared: specs.iter().map(ToString::to_string).collect(),
        on_record,
        basis,
        shapes,
        inseparable,
    }
}

/// What a hardware owner runs for one shape: synthesize it, compile it (outside hefprobe: the
/// Hailo DFC with the project's recipe), and read the answer with `run` (explain ranks the
/// catalog against the device's logits; per layer where the HEF exposes layer outputs).
fn commands(hidden: usize) -> Vec<String> {
    let heads = heads_of(hidden);
    let name = format!("f16-h{hidden}");
    vec![
        format!(
            "hefprobe synth --preset smollm2-135m --hidden {hidden} --heads {heads} --kv-heads {heads} --layers 6 \
             --massive-channels 4 --seed 16 -o {name}"
        ),
        format!("compile {name} with the Hailo DFC (finding 7's recipe) into {name}.hef"),
        format!(
            "hefprobe run probes/hidden-size-degeneracy.toml --checkpoint {name} --backend hef={name}.hef \
             --report markdown={name}.md"
        ),
    ]
}
