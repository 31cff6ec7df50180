//! `hefprobe reduce`: the smallest inputs on which a probe's drift still reproduces — the same
//! first drifting tap and the same best explanation. Decode steps go first (every later run is
//! cheaper without them), then the prompt by delta debugging (Zeller and Hildebrandt, "Simplifying
//! and Isolating Failure-Inducing Input", 2002: drop chunks, then complements, halving the chunk
//! size until single tokens), then the chunking and the start position. The checkpoint and the
//! backends are prepared once; a run budget bounds the search, and each smaller reproduction is
//! handed out as it is found, so an interrupted search keeps the best so far.

use super::backends::run_backends;
use super::compared::compare_runs;
use super::explained::explain_stage;
use super::prepare::Prepared;
use super::spill::CaptureOptions;
use crate::error::{Error, Result};
use crate::inputs::{DecodeSpec, InputSet};
use std::path::Path;

/// What must still hold: the first drifting tap, and the best explanation when there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    pub tap: String,
    pub best: Option<String>,
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "first drift at {}", self.tap)?;
        match &self.best {
            Some(b) => write!(f, ", best explanation {b}"),
            None => write!(f, ", no explanation ranked first"),
        }
    }
}

/// Where the search stands: the smallest inputs found and the runs spent.
#[derive(Debug, Clone)]
pub struct Reduced {
    pub inputs: InputSet,
    pub drift: Drift,
    pub runs: usize,
    /// Why the search ended early (the budget), if it did.
    pub stopped: Option<String>,
}

/// The probe's inputs' size, for the sentence: prompt tokens and decode steps.
pub fn size(i: &InputSet) -> (usize, usize) {
    (i.prompt.len(), i.decode.steps())
}

/// The drift of `p` on `inputs` (None: within thresholds, or the run failed on these inputs).
/// Explain runs only when the tap already matches `want`.
fn drift_of(
    p: &mut Prepared,
    io: &CaptureOptions,
    inputs: &InputSet,
    want: Option<&Drift>,
) -> Result<Option<Drift>> {
    p.inputs = inputs.clone();
    let mut runs = run_backends(p, io, &mut crate::backend::make_backend)?;
    let observed = match p.explain.as_ref().and_then(|e| e.observed.clone()) {
        Some(o) if runs.backend(&o).is_some() => o,
        _ => runs.backends[0].label.clone(),
    };
    if runs.backend(&observed).is_some_and(|b| b.error.is_some()) {
        return Ok(None);
    }
    let mut compared = Vec::new();
    compare_runs(p, &runs, &mut compared)?;
    let Some(c) = compared.iter().find(|c| c.label == observed) else { return Ok(None) };
    let Some(first) = crate::compare::locate::locate(&c.cumulative).into_iter().next() else {
        return Ok(None);
    };
    let tap = first.tap.to_string();
    if want.is_some_and(|w| w.tap != tap) {
        return Ok(Some(Drift { tap, best: None }));
    }
    let best = explain_stage(p, &runs, &compared, p.explain.as_ref())?.and_then(|e| e.report.best);
    runs.backends.clear();
    Ok(Some(Drift { tap, best }))
}

/// The search. `found` gets each smaller reproduction (the first is the probe's own inputs).
pub fn reduce(
    p: &mut Prepared,
    io: &CaptureOptions,
    budget: usize,
    found: &mut dyn FnMut(&Reduced) -> Result<()>,
) -> Result<Reduced> {
    if p.explain.is_none() {
        return Err(Error::usage(
            "reduce keeps the best explanation fixed: the probe needs an [explain] table (observed = \"BACKEND\")",
        ));
    }
    // A dump holds what was recorded on its own inputs: it cannot answer smaller ones.
    if let Some(d) = p.specs.iter().find(|b| b.kind == crate::backend::BackendKind::Dump) {
        return Err(Error::usage(format!(
            "backend `{}` is a dump, recorded on the probe's own inputs: reduce re-runs every backend on \
             smaller inputs, which a recording cannot answer; give --backend hef=... (the HEF it was \
             recorded from) or an emulator instead",
            d.label()
        )));
    }
    let start = p.inputs.clone();
    let Some(drift) = drift_of(p, io, &start, None)? else {
        return Err(Error::input(
            p.probe.file.clone().unwrap_or_else(|| p.probe.name.clone()),
            "nothing to reduce: on its own inputs the probe's observed backend is within its thresholds",
        ));
    };
    let mut best = Reduced { inputs: start, drift, runs: 1, stopped: None };
    found(&best)?;
    let mut tries = Search { p, io, best: &mut best, budget, found };
    tries.decode()?;
    tries.prompt()?;
    tries.rest()?;
    Ok(best)
}

struct Search<'a, 'b> {
    p: &'a mut Prepared,
    io: &'a CaptureOptions,
    best: &'a mut Reduced,
    budget: usize,
    found: &'b mut dyn FnMut(&Reduced) -> Result<()>,
}

impl Search<'_, '_> {
    /// Run `candidate`; keep it when the same drift reproduces. False once the budget is spent.
    fn keeps(&mut self, candidate: InputSet) -> Result<bool> {
        if self.best.runs >= self.budget {
            self.best.stopped = Some(format!("the run budget ({}) is spent", self.budget));
            return Ok(false);
        }
        let cfg = &self.p.ckpt.config;
        if candidate.validate(cfg.vocab_size, cfg.max_position_embeddings).is_err() {
            return Ok(false);
        }
        self.best.runs += 1;
        let same = drift_of(self.p, self.io, &candidate, Some(&self.best.drift))?
            .is_some_and(|d| d == self.best.drift);
        if same {
            self.best.inputs = candidate;
            (self.found)(self.best)?;
        }
        Ok(same)
    }

    fn spent(&self) -> bool {
        self.best.stopped.is_some()
    }

    /// Decode steps: none at all, else halved while it reproduces.
    fn decode(&mut self) -> Result<()> {
        let with = |i: &InputSet, n: usize| {
            let decode = match &i.decode {
                DecodeSpec::Greedy(_) => DecodeSpec::Greedy(n),
                DecodeSpec::Forced(t) => DecodeSpec::Forced(t[..n.min(t.len())].to_vec()),
            };
            InputSet { decode, ..i.clone() }
        };
        let mut n = size(&self.best.inputs).1;
        while n > 0 && !self.spent() {
            if self.keeps(with(&self.best.inputs, 0))? {
                return Ok(());
            }
            n /= 2;
            if n == 0 || !self.keeps(with(&self.best.inputs, n))? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The prompt by delta debugging: each of `parts` chunks dropped in turn, then each kept
    /// alone; a success restarts at the new size, a failure halves the chunks.
    fn prompt(&mut self) -> Result<()> {
        let mut parts = 2usize;
        while self.best.inputs.prompt.len() >= 2 && !self.spent() {
            let prompt = self.best.inputs.prompt.clone();
            let n = prompt.len();
            let step = n.div_ceil(parts);
            let chunks: Vec<std::ops::Range<usize>> =
                (0..n).step_by(step).map(|a| a..(a + step).min(n)).collect();
            let mut shrunk = false;
            for r in &chunks {
                let without: Vec<u32> = prompt[..r.start].iter().chain(&prompt[r.end..]).copied().collect();
                if self.keeps(self.with_prompt(without))? {
                    parts = (parts - 1).max(2);
                    shrunk = true;
                    break;
                }
                if self.spent() {
                    return Ok(());
                }
            }
            if !shrunk && chunks.len() > 2 {
                for r in &chunks {
                    if self.keeps(self.with_prompt(prompt[r.clone()].to_vec()))? {
                        parts = 2;
                        shrunk = true;
                        break;
                    }
                }
            }
            if !shrunk {
                if step == 1 {
                    return Ok(());
                }
                parts = (parts * 2).min(n);
            }
        }
        Ok(())
    }

    fn with_prompt(&self, prompt: Vec<u32>) -> InputSet {
        let chunk = self.best.inputs.chunk.filter(|&c| c < prompt.len());
        InputSet { prompt, chunk, ..self.best.inputs.clone() }
    }

    /// One prefill instead of chunks, then position 0.
    fn rest(&mut self) -> Result<()> {
        if self.best.inputs.chunk.is_some() && !self.spent() {
            self.keeps(InputSet { chunk: None, ..self.best.inputs.clone() })?;
        }
        if self.best.inputs.start_position > 0 && !self.spent() {
            self.keeps(InputSet { start_position: 0, ..self.best.inputs.clone() })?;
        }
        Ok(())
    }
}

/// What the command line ran in place of the probe's own: its backends (empty: the probe's)
/// and checkpoint (None: the probe's).
#[derive(Debug, Clone, Default)]
pub struct Ran {
    pub backends: Vec<crate::backend::BackendSpec>,
    pub checkpoint: Option<crate::model::CheckpointRef>,
}

impl Ran {
    /// The probe's `[[backend]]`s, `[explain] observed` and `[checkpoint]` replaced by what ran.
    /// Paths typed on the command line are relative to where it ran: written absolute.
    fn replace_in(&self, t: &mut toml::Table, what: &str) -> Result<()> {
        use toml::Value;
        let abs = |p: &std::path::Path| {
            Value::String(std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string())
        };
        if !self.backends.is_empty() {
            let mut tables = Vec::new();
            for b in &self.backends {
                let mut b = b.clone();
                for p in b.paths_mut() {
                    *p = std::path::absolute(&*p).unwrap_or_else(|_| p.clone());
                }
                let mut bt = toml::Table::try_from(&b).map_err(|e| Error::input(what, e.to_string()))?;
                bt.insert("name".into(), Value::String(b.label()));
                tables.push(Value::Table(bt));
            }
            t.insert("backend".into(), Value::Array(tables));
            // The command line's backends replaced the probe's, so explain observed the first
            // of them unless the probe named one; the reduced probe says which.
            let labels: Vec<String> = self.backends.iter().map(|b| b.label()).collect();
            if let Some(Value::Table(e)) = t.get_mut("explain") {
                let named =
                    e.get("observed").and_then(Value::as_str).is_some_and(|o| labels.iter().any(|l| l == o));
                if !named {
                    e.insert("observed".into(), Value::String(labels[0].clone()));
                }
            }
        }
        match &self.checkpoint {
            None => {}
            Some(crate::model::CheckpointRef::Path { path, revision, strict_config }) => {
                let mut c = toml::Table::new();
                let hub = crate::model::hub::is_repo_id(&path.display().to_string()) && !path.exists();
                c.insert(
                    "path".into(),
                    if hub { Value::String(path.display().to_string()) } else { abs(path) },
                );
                if revision != crate::model::hub::DEFAULT_REVISION {
                    c.insert("revision".into(), Value::String(revision.clone()));
                }
                if *strict_config {
                    c.insert("strict_config".into(), Value::Boolean(true));
                }
                t.insert("checkpoint".into(), Value::Table(c));
            }
            Some(crate::model::CheckpointRef::Synth(_)) => {
                return Err(Error::usage(format!(
                    "{what}: a synthesized checkpoint given on the command line cannot be written into the \
                     reduced probe; put it in the probe's [checkpoint]"
                )))
            }
        }
        Ok(())
    }
}

/// [`reduce`] writing its probe: `out` is rewritten after each smaller reproduction, so Ctrl-C
/// keeps the best found so far, and holds the minimal probe at the end (`-`: stdout, once).
/// `from` is the probe file's text, where it was found, and what ran in its place.
pub fn reduce_into(
    p: &mut Prepared,
    io: &CaptureOptions,
    budget: usize,
    (original, path, ran): (&str, &Path, &Ran),
    out: &Path,
) -> Result<Reduced> {
    super::cleanup::install();
    let mut keep = |r: &Reduced| -> Result<()> {
        if out == Path::new("-") {
            return Ok(()); // stdout gets the final probe only
        }
        let text = probe_toml(original, path, out, r, ran)?;
        super::cleanup::writing(|| crate::files::write_file_quiet(out, text))?;
        let (t, d) = size(&r.inputs);
        super::cleanup::leave(format!(
            "{} holds the smallest reproduction found so far ({t} tokens, {d} decode steps, after {} runs)",
            out.display(),
            r.runs
        ));
        Ok(())
    };
    let r = reduce(p, io, budget, &mut keep)?;
    crate::files::write_file(out, probe_toml(original, path, out, &r, ran)?)?;
    Ok(r)
}

/// The probe file rewritten for `inputs`: its `[inputs]` replaced by token ids (decode steps,
/// chunking and start position as found), its name suffixed `-min`, and a header saying where it
/// came from. Relative paths of the probe (checkpoint, backends) are made absolute when the
/// reduced file lives elsewhere.
///
/// What ran in the probe's place is written in its place (`ran`): the command line's backends
/// (`--backend hef=x.hef`, `--fault`) and checkpoint, so the reduced probe reproduces the drift
/// of what was reduced, not of the probe's own emulator.
pub fn probe_toml(
    original: &str,
    from: &std::path::Path,
    to: &std::path::Path,
    r: &Reduced,
    ran: &Ran,
) -> Result<String> {
    let what = from.display().to_string();
    let mut t: toml::Table = toml::from_str(original).map_err(|e| Error::input(&what, e.to_string()))?;
    ran.replace_in(&mut t, &what)?;
    if let Some(toml::Value::String(n)) = t.get_mut("name") {
        n.push_str("-min");
    }
    let mut inputs = toml::Table::new();
    let ids = |v: &[u32]| toml::Value::Array(v.iter().map(|&i| toml::Value::Integer(i64::from(i))).collect());
    inputs.insert("tokens".into(), ids(&r.inputs.prompt));
    match &r.inputs.decode {
        DecodeSpec::Greedy(0) => {}
        DecodeSpec::Greedy(n) => {
            inputs.insert("decode".into(), toml::Value::Integer(*n as i64));
        }
        DecodeSpec::Forced(v) if v.is_empty() => {}
        DecodeSpec::Forced(v) => {
            inputs.insert("decode_tokens".into(), ids(v));
        }
    }
    if let Some(c) = r.inputs.chunk {
        inputs.insert("chunk".into(), toml::Value::Integer(c as i64));
    }
    if r.inputs.start_position > 0 {
        inputs.insert("start_position".into(), toml::Value::Integer(r.inputs.start_position as i64));
    }
    t.insert("inputs".into(), toml::Value::Table(inputs));
    let (here, there) = (super::bundle::parent(from), super::bundle::parent(to));
    let same = here.canonicalize().ok().zip(there.canonicalize().ok()).is_some_and(|(a, b)| a == b);
    if !same {
        let absolute = |v: &mut toml::Value| {
            if let toml::Value::String(s) = v {
                if std::path::Path::new(s.as_str()).is_relative() {
                    let joined = here.join(s.as_str());
                    *s = joined.canonicalize().unwrap_or(joined).display().to_string();
                }
            }
        };
        // A hub id stays as written (the loader looks it up in the hub cache, as the probe's
        // own loader decided), and `beside` is a backend's label, not a path.
        if let Some(toml::Value::Table(c)) = t.get_mut("checkpoint") {
            let hub = c
                .get("path")
                .and_then(|v| v.as_str())
                .is_some_and(|s| crate::model::hub::is_repo_id(s) && !here.join(s).exists());
            if !hub {
                c.get_mut("path").map(absolute);
            }
        }
        if let Some(toml::Value::Array(bs)) = t.get_mut("backend") {
            for b in bs.iter_mut().filter_map(|b| b.as_table_mut()) {
                for k in ["path", "map", "output_map", "hef", "template"] {
                    b.get_mut(k).map(absolute);
                }
            }
        }
    }
    let (tokens, decode) = size(&r.inputs);
    let body = toml::to_string(&t).map_err(|e| Error::input(&what, e.to_string()))?;
    Ok(format!(
        "# Reduced by `hefprobe reduce` from {what} in {} runs: {tokens} prompt tokens, {decode} decode steps; {}.\n{body}",
        r.runs, r.drift
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written into another folder, a reduced probe keeps a hub id as the id it is and a
    /// `beside` as the label it is; only paths become absolute (each once became a path).
    #[test]
    fn a_reduced_probe_keeps_hub_ids_and_labels_as_given() {
        let t = tempfile::tempdir().unwrap();
        let (from, to) = (t.path().join("p/probe.toml"), t.path().join("out/min.toml"));
        std::fs::create_dir_all(from.parent().unwrap()).unwrap();
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let original = "version = 1\nname = \"x\"\nquestion = \"q\"\n[checkpoint]\npath = \"org/tiny\"\n\
                        [inputs]\ntokens = [1, 2]\n[[backend]]\nname = \"device\"\nkind = \"hef\"\n\
                        path = \"m.hef\"\nbeside = \"emu\"\n";
        let r = Reduced {
            inputs: InputSet::new(vec![1]),
            drift: Drift { tap: "logits".into(), best: None },
            runs: 3,
            stopped: None,
        };
        let text = probe_toml(original, &from, &to, &r, &Ran::default()).unwrap();
        let v: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(v["checkpoint"]["path"].as_str(), Some("org/tiny"), "{text}");
        let b = &v["backend"].as_array().unwrap()[0];
        assert_eq!(b["beside"].as_str(), Some("emu"), "{text}");
        let path = std::path::PathBuf::from(b["path"].as_str().unwrap());
        assert!(path.is_absolute() && path.ends_with("p/m.hef"), "{text}");
    }

    /// The command line's backends are written whole into the reduced probe: every setting a
    /// `--backend` gives (a HEF's group and device, a dump's shards, a server's address, dialect,
    /// model, template and top log-probabilities) reads back the same, every path absolute.
    #[test]
    fn a_reduced_probe_keeps_every_setting_of_the_command_lines_backends() {
        use crate::backend::BackendSpec;
        let t = tempfile::tempdir().unwrap();
        let (from, to) = (t.path().join("probe.toml"), t.path().join("min.toml"));
        let original = "version = 1\nname = \"x\"\nquestion = \"q\"\n[inputs]\ntokens = [1, 2]\n";
        let ran = Ran {
            backends: [
                "hef=m.hef,map=o.toml,group=g1,device=sim-h10,first_layer=2",
                "dump=d.npz,hef=m.hef,shards=3+4",
                "serve=http://127.0.0.1:8000,api=openai,model=smol,template=t.jinja,logprobs=5,timeout=9",
                "emulator=shared-softmax@layers=0",
            ]
            .map(|b| BackendSpec::parse_cli(b).unwrap())
            .to_vec(),
            checkpoint: None,
        };
        let r = Reduced {
            inputs: InputSet::new(vec![1]),
            drift: Drift { tap: "logits".into(), best: None },
            runs: 3,
            stopped: None,
        };
        let text = probe_toml(original, &from, &to, &r, &ran).unwrap();
        let v: toml::Table = toml::from_str(&text).unwrap();
        let written = v["backend"].as_array().unwrap();
        assert_eq!(written.len(), ran.backends.len(), "{text}");
        for (w, asked) in written.iter().zip(&ran.backends) {
            let mut back: BackendSpec = w.clone().try_into().unwrap();
            assert_eq!(back.name.take(), Some(asked.label()), "{text}");
            for p in back.paths_mut() {
                assert!(p.is_absolute(), "{} is written absolute: {text}", p.display());
            }
            let mut asked = asked.clone();
            for p in asked.paths_mut() {
                *p = std::path::absolute(&*p).unwrap();
            }
            assert_eq!(back, asked, "{text}");
        }
    }
}
