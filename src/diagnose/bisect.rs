//! Bisection on the device with prefix HEFs, each the graph of blocks 0..=B compiled to
//! output `layers.B.out` (docs/HAILO-RUNTIME.md, "Per layer on the device"): the cut points,
//! the prefixes a folder holds, and the search, which asks first whether the last block
//! drifts at all, then halves: ⌈log2 L⌉ + 1 HEFs run.

use crate::backend::{BackendKind, BackendSpec};
use crate::compare::View;
use crate::device::synth_hef::sim_spec;
use crate::error::{Error, Result};
use crate::hef::Hef;
use crate::model::{Checkpoint, CheckpointRef};
use crate::probe::run::{run_probe, ExplainChoice, ProbeOverrides, RunOptions};
use crate::probe::schema::Probe;
use crate::report::doc::{Doc, Table};
use crate::report::{Document, Format};
use crate::tap::{LayerTap, Tap};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a bisection printed, the first drifting block it found, and what stopped it (a prefix
/// the search needs that the folder does not hold), said after the table.
pub struct Bisected {
    pub doc: Doc,
    pub first: Option<usize>,
    pub error: Option<Error>,
}

impl Document for Bisected {
    const COMMAND: &'static str = "bisect";
    const FORMATS: &'static [Format] = &[Format::Terminal];

    fn doc(&self, _to: Option<&Path>) -> Doc {
        self.doc.clone()
    }
}

/// The DFC parse arguments of the prefix ending at block `b`: the HF module whose output it is.
fn parse_hint(b: usize) -> String {
    format!("end_node_names=[<the node of model.layers.{b}'s output in your parsed graph>]")
}

/// `bisect plan`: the cut points of the search over `ckpt`'s blocks, and how to compile each
/// prefix.
pub fn cut_points(ckpt: &Checkpoint) -> Bisected {
    let l = ckpt.config.num_layers;
    let runs = l.next_power_of_two().trailing_zeros() as usize + 1;
    let mut d = Doc::new();
    d.line(format!(
        "bisect over the {l} blocks of {}: at most {runs} prefix HEFs run (the last block, then halving). \
         Compile each on demand (`hefprobe bisect next DIR --probe P.toml` names the next), or all of them:",
        ckpt.source
    ));
    let mut t = Table::new(["block", "prefix", "output", "DFC parse"]).align("rlll");
    // The first two runs whatever the answers: the whole stack, then the middle.
    let order = [l - 1, (l - 1) / 2];
    for b in 0..l {
        let first = match order.iter().position(|&x| x == b) {
            Some(0) => " (run first)",
            Some(_) => " (run second)",
            None => "",
        };
        t.row([b.to_string(), format!("blocks 0..={b}{first}"), format!("layers.{b}.out"), parse_hint(b)]);
    }
    d.table(t).line(
        "A simulated prefix: hefprobe synth-hef --layers 0..=B (with --synth/--checkpoint) -o DIR/prefix-B.hef",
    );
    Bisected { doc: d, first: None, error: None }
}

/// A prefix HEF's last block, read from what it outputs: a simulated HEF's recorded range, or
/// the highest `layers.B.out` among its outputs (None: it outputs logits, the whole model).
fn last_block(path: &Path) -> Result<(Option<usize>, Option<String>)> {
    let what = path.display().to_string();
    let hef = Hef::read(path)?;
    if let Some(spec) = sim_spec(&hef, &what)? {
        let made_from = Some(format!("{:?}", spec.checkpoint));
        return match spec.layers {
            Some([0, b]) => Ok((Some(b), made_from)),
            Some([a, _]) => {
                Err(Error::input(&what, format!("starts at block {a}: a prefix HEF starts at block 0")))
            }
            None => Ok((None, made_from)),
        };
    }
    let mut last = None;
    for o in hef.groups.iter().flat_map(|g| &g.outputs) {
        if let Some(Tap::Layer(b, LayerTap::Out)) = Tap::of_output(&o.name) {
            last = last.max(Some(b));
        }
    }
    match last {
        Some(b) => Ok((Some(b), None)),
        None => Err(Error::input(
            &what,
            "outputs no `<group>/layers.B.out`: a prefix HEF ends at one block's output, named so",
        )),
    }
}

/// The prefix HEFs of `dir` by last block (the whole model under `layers − 1`), refused when two
/// end at the same block or they were made from different checkpoints.
pub fn prefixes(dir: &Path, layers: usize) -> Result<BTreeMap<usize, PathBuf>> {
    let mut found: BTreeMap<usize, PathBuf> = BTreeMap::new();
    let mut origin: Option<(String, PathBuf)> = None;
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "hef"))
        .collect();
    paths.sort();
    for p in paths {
        // A FIFO or device named *.hef is refused by the reader (files::open) before it blocks.
        let (b, made_from) = last_block(&p)?;
        let b = b.unwrap_or(layers - 1);
        let what = p.display().to_string();
        if b >= layers {
            return Err(Error::input(what, format!("ends at block {b}; the checkpoint has {layers}")));
        }
        if let (Some(m), Some((first, from))) = (&made_from, &origin) {
            if m != first {
                let why = format!(
                    "was made from another checkpoint than {}; a folder holds one model's prefixes",
                    from.display()
                );
                return Err(Error::input(what, why));
            }
        }
        if origin.is_none() {
            origin = made_from.map(|m| (m, p.clone()));
        }
        if let Some(other) = found.insert(b, p.clone()) {
            return Err(Error::input(
                what,
                format!("ends at block {b}, as {} does: keep one of them", other.display()),
            ));
        }
    }
    Ok(found)
}

/// A bisection's search: `probe` run against each prefix HEF of `dir` the search asks for (the
/// `model` in place of the probe's checkpoint); with `next`, a prefix the folder does not hold
/// is named to compile rather than refused.
pub struct Search<'a> {
    pub dir: &'a Path,
    pub probe: &'a Probe,
    pub model: Option<&'a CheckpointRef>,
    pub next: bool,
    pub command: &'a str,
}

impl Search<'_> {
    /// Whether the prefix at `path` drifts on the probe's inputs, and the headline of its run.
    fn drifts(&self, path: &Path) -> Result<(bool, String)> {
        let opts = RunOptions {
            probe: ProbeOverrides {
                backends: vec![BackendSpec {
                    path: Some(path.to_path_buf()),
                    ..BackendSpec::new(BackendKind::Hef)
                }],
                checkpoint: self.model.cloned(),
                thresholds: Vec::new(),
                explain: ExplainChoice::Off,
            },
            captures: Default::default(),
            command: self.command.to_string(),
        };
        let r = run_probe(self.probe, &opts)?.ok()?;
        let first = r.report.comparisons.iter().find(|p| p.view == View::Cumulative);
        let failed = first.and_then(|p| p.failed_rows().next()).map(|row| {
            let cos = row.metrics.as_ref().map_or("-".into(), |m| format!("{:.6}", m.cosine));
            format!("first failing tap {} {} (cosine {cos})", row.phase, row.tap)
        });
        Ok((r.report.drift(), failed.unwrap_or_else(|| "no drift beyond thresholds".into())))
    }

    /// The search stopped at block `b`, whose prefix the folder does not hold: `next` names it,
    /// `run` refuses.
    fn missing(&self, b: usize, t: Table) -> Bisected {
        let mut doc = Doc::new();
        doc.table(t);
        let dir = self.dir.display();
        if self.next {
            doc.line(format!(
                "next: compile the prefix of blocks 0..={b} (output layers.{b}.out; {}) into {dir}",
                parse_hint(b)
            ));
            return Bisected { doc, first: None, error: None };
        }
        let why = format!(
            "holds no prefix ending at block {b}, which the search needs next: compile it ({}), or let \
             `hefprobe bisect next` name each one in turn",
            parse_hint(b)
        );
        Bisected { doc, first: None, error: Some(Error::input(dir.to_string(), why)) }
    }

    /// Run the search over `have`, the prefixes by last block of an `l`-block model.
    pub fn run(&self, l: usize, have: &BTreeMap<usize, PathBuf>) -> Result<Bisected> {
        let mut t = Table::new(["run", "block", "HEF", "verdict"]).align("rrll");
        let mut runs = 0;
        let mut test = |b: usize, t: &mut Table| -> Result<Option<bool>> {
            let Some(path) = have.get(&b) else { return Ok(None) };
            runs += 1;
            let (drift, line) = self.drifts(path)?;
            t.row([runs.to_string(), b.to_string(), path.display().to_string(), line]);
            Ok(Some(drift))
        };
        // Does the whole stack drift at all?
        match test(l - 1, &mut t)? {
            None => return Ok(self.missing(l - 1, t)),
            Some(false) => {
                let mut doc = Doc::new();
                doc.table(t);
                doc.line(format!(
                    "no drift at block {} on the device: nothing to bisect ({runs} HEF run)",
                    l - 1
                ));
                return Ok(Bisected { doc, first: None, error: None });
            }
            Some(true) => {}
        }
        // The first drifting block is in lo..=hi; hi drifts.
        let (mut lo, mut hi) = (0, l - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match test(mid, &mut t)? {
                None => return Ok(self.missing(mid, t)),
                Some(true) => hi = mid,
                Some(false) => lo = mid + 1,
            }
        }
        let mut doc = Doc::new();
        doc.table(t);
        doc.line(format!(
            "first drifting layer on the device: block {hi} (measured: layers.{hi}.out; {runs} prefix HEFs run)"
        ));
        Ok(Bisected { doc, first: Some(hi), error: None })
    }
}
