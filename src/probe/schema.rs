//! The probe file (`probes/*.toml`): one question, the inputs that ask it, the backends that
//! answer it, and the thresholds that judge the answer. Unknown keys are errors that name
//! the key (serde's `deny_unknown_fields`, with toml's line and column).

use crate::backend::BackendSpec;
use crate::error::{Error, Result};
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::chat::ChatTemplate;
use crate::model::synth::SynthOverrides;
use crate::model::tokenizer::Tokenizer;
use crate::model::Checkpoint;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const PROBE_VERSION: u32 = 1;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// Schema version; must be 1.
    pub version: u32,
    pub name: String,
    /// The question this probe answers, in one sentence.
    pub question: String,
    /// Row of the findings table this probe relates to.
    pub finding: Option<u32>,
    pub checkpoint: CheckpointSpec,
    pub inputs: InputsSpec,
    /// Tap globs to record (default: all).
    #[serde(default = "all_taps")]
    pub taps: Vec<String>,
    /// Backends compared against the reference.
    #[serde(default, rename = "backend")]
    pub backends: Vec<BackendSpec>,
    #[serde(default)]
    pub thresholds: ThresholdsSpec,
    #[serde(default)]
    pub compare: CompareSpec,
    #[serde(default)]
    pub explain: Option<crate::explain::ExplainSpec>,
    #[serde(default)]
    pub sweep: Option<SweepSpec>,
    #[serde(skip)]
    pub path: PathBuf,
}

/// A grid to run the probe over (`hefprobe sweep`): every combination is one point.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct SweepSpec {
    /// Synth hidden sizes (heads = hidden / head_dim, kv heads = heads / kv_ratio).
    pub hidden: Vec<usize>,
    /// Head dim kept fixed while hidden varies (default: the preset's).
    pub head_dim: Option<usize>,
    /// heads / kv_heads (default 1: no GQA).
    pub kv_ratio: Option<usize>,
    /// Checkpoint folders (instead of synth dims).
    pub checkpoints: Vec<PathBuf>,
    /// Quantization settings (each one emulator point), e.g. "w8a16".
    #[serde(default, deserialize_with = "crate::fault::spec::de_quantizations")]
    pub quant: Vec<crate::fault::spec::FaultSpec>,
    /// Fault specs (each one emulator point; combined with every quant setting).
    pub faults: Vec<crate::fault::spec::FaultSpec>,
    /// Prompt lengths (the probe's prompt repeated or cut to length).
    pub prompt_len: Vec<usize>,
    /// Greedy steps for the degeneracy metrics.
    #[serde(default = "default_generate")]
    pub generate: usize,
    /// How each generated token is computed: "kv" (prefill once, then one decode step per
    /// token through the KV cache; the default) and/or "base" (no decode: the prefill re-run
    /// over the whole sequence at every generated step, as finding 16's base-scope runs did).
    pub scope: Vec<String>,
}

/// The most points one `[sweep]` may have (each is at least one model run).
pub const MAX_SWEEP_POINTS: usize = 10_000;

fn default_generate() -> usize {
    32
}

fn all_taps() -> Vec<String> {
    vec!["*".into()]
}

/// `[checkpoint]`: a folder or GGUF file, or a synth preset with overrides of its dims.
#[derive(Debug, Clone, Default)]
pub struct CheckpointSpec {
    /// A checkpoint folder or .gguf file, relative to the probe file, or a model id (ORG/NAME)
    /// in the local Hugging Face hub cache when no such folder exists.
    pub path: Option<PathBuf>,
    /// With a model id: the branch, tag or commit sha in the hub cache (default main).
    pub revision: Option<String>,
    /// config.json keys hefprobe does not know are an error instead of a warning.
    pub strict_config: bool,
    /// Or a synth preset, so the probe runs anywhere.
    pub synth: Option<String>,
    pub seed: u64,
    /// Overrides of the synth preset's dims (`hidden`, `layers`, `heads`, ...).
    pub overrides: SynthOverrides,
}

impl CheckpointSpec {
    /// The synth preset with this table's overrides of its dims.
    pub fn synth_spec(&self) -> Result<crate::model::synth::SynthSpec> {
        let preset =
            self.synth.as_deref().ok_or_else(|| Error::usage("[checkpoint] names no synth preset"))?;
        let mut s = crate::model::synth::SynthSpec::preset(preset, self.seed)?;
        s.apply(&self.overrides);
        Ok(s)
    }

    /// The checkpoint this table names, for the one resolver every command uses.
    pub fn to_ref(&self) -> Result<crate::model::CheckpointRef> {
        Ok(match &self.path {
            Some(path) => crate::model::CheckpointRef::Path {
                path: path.clone(),
                revision: self.revision.clone().unwrap_or_else(|| crate::model::hub::DEFAULT_REVISION.into()),
                strict_config: self.strict_config,
            },
            None => crate::model::CheckpointRef::Synth(self.synth_spec()?),
        })
    }
}

/// By hand because serde's `flatten` drops `deny_unknown_fields`: this table's own keys are
/// taken out, and [`SynthOverrides`] (which refuses unknown keys) reads the rest, so a typo
/// anywhere in `[checkpoint]` is named.
impl<'de> Deserialize<'de> for CheckpointSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut table = toml::Table::deserialize(d)?;
        let path = take(&mut table, "path")?;
        let synth = take(&mut table, "synth")?;
        let seed = take(&mut table, "seed")?.unwrap_or(0);
        let revision = take(&mut table, "revision")?;
        let strict_config = take(&mut table, "strict_config")?.unwrap_or(false);
        let overrides = SynthOverrides::deserialize(toml::Value::Table(table)).map_err(D::Error::custom)?;
        Ok(CheckpointSpec { path, synth, seed, revision, strict_config, overrides })
    }
}

/// Take `key` out of a table read by hand (as `[checkpoint]` and a suite's `[[target]]` are),
/// an error naming the key if its value is not a `T`.
pub fn take<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    t: &mut toml::Table,
    key: &str,
) -> std::result::Result<Option<T>, E> {
    t.remove(key).map(|v| T::deserialize(v).map_err(|e| E::custom(format!("key `{key}`: {e}")))).transpose()
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct InputsSpec {
    pub tokens: Option<Vec<u32>>,
    pub text: Option<String>,
    /// tokenizer.json for `text` (default: the checkpoint's, or the synth tokenizer).
    pub tokenizer: Option<PathBuf>,
    pub add_special_tokens: bool,
    /// Prefill chunk size (remainder first, as HailoRT).
    pub chunk: Option<usize>,
    /// Greedy decode steps (resolved by the reference, then teacher-forced everywhere).
    pub decode: Option<usize>,
    /// Teacher-forced decode tokens.
    pub decode_tokens: Option<Vec<u32>>,
    pub start_position: usize,
}

impl InputsSpec {
    /// The tokenizer of a text prompt: the one named, the checkpoint's, or the synth one.
    fn tokenizer(&self, ckpt: &Checkpoint) -> Result<Tokenizer> {
        self.tokenizer.as_ref().map_or_else(|| Tokenizer::for_checkpoint(ckpt), |p| Tokenizer::load(p))
    }

    /// The InputSet these inputs state (the command line's prompt flags build the same spec).
    pub fn input_set(&self, ckpt: &Checkpoint) -> Result<InputSet> {
        self.input_set_in(ckpt, None)
    }

    /// [`InputsSpec::input_set`], with `text` as the user message of `chat` when given: the
    /// prompt is the template rendered around it, tokenized as the server tokenizes it (token
    /// ids are taken as they are).
    pub fn input_set_in(&self, ckpt: &Checkpoint, chat: Option<&ChatTemplate>) -> Result<InputSet> {
        let (prompt, bos_added) = match (&self.tokens, &self.text) {
            (Some(t), _) => (t.clone(), None),
            (None, Some(text)) => {
                let templated = chat.map(|c| c.render_user(text)).transpose()?;
                let enc = self.tokenizer(ckpt)?.encode(templated.as_deref().unwrap_or(text), self.add_special_tokens)?;
                (enc.ids, Some(enc.bos_added))
            }
            (None, None) => {
                return Err(Error::usage(
                    "no prompt: give token ids (--tokens 1,2,3, or tokens = [...] in a probe) or text (--text / text = \"...\")",
                ))
            }
        };
        let decode = match (&self.decode_tokens, self.decode) {
            (Some(t), _) => DecodeSpec::Forced(t.clone()),
            (None, Some(n)) => DecodeSpec::Greedy(n),
            (None, None) => DecodeSpec::Forced(Vec::new()),
        };
        let message = self.text.clone().filter(|_| chat.is_some() && self.tokens.is_none());
        let inputs = InputSet {
            prompt,
            chunk: self.chunk,
            decode,
            start_position: self.start_position,
            bos_added,
            message,
        };
        if let Some(m) = inputs.past_positions(ckpt.config.max_position_embeddings) {
            return Err(Error::usage(format!(
                "{m}: shorten the prompt, or give fewer decode steps (--decode / decode) or a lower start \
                 position (--start-position / start_position)"
            )));
        }
        inputs.validate(ckpt.config.vocab_size, ckpt.config.max_position_embeddings)?;
        Ok(inputs)
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ThresholdsSpec {
    /// "most-specific" (default) or "tightest".
    pub policy: Option<crate::compare::thresholds::Policy>,
    pub flip_margin: Option<f64>,
    /// Bounds for every tap (merged over the built-in defaults).
    pub default: BTreeMap<String, f64>,
    /// Bounds per tap glob.
    pub taps: BTreeMap<String, BTreeMap<String, f64>>,
}

impl ThresholdsSpec {
    pub fn build(&self) -> Result<crate::compare::thresholds::Thresholds> {
        use crate::compare::thresholds::{check_bound, Rule, Thresholds};
        let mut t = Thresholds::default();
        for (k, &v) in &self.default {
            let metric = check_bound(k, v).map_err(|e| Error::usage(format!("[thresholds.default] {e}")))?;
            t.default.insert(metric, v);
        }
        for (glob, bounds) in &self.taps {
            let mut rule =
                Rule::new(glob, bounds).map_err(|e| Error::usage(format!("[thresholds.taps] {e}")))?;
            rule.origin = format!("[thresholds.taps] `{glob}`");
            t.rules.push(rule);
        }
        t.policy = self.policy.unwrap_or(t.policy);
        if let Some(m) = self.flip_margin {
            if !(m.is_finite() && m >= 0.0) {
                return Err(Error::usage(format!(
                    "[thresholds] flip_margin = {m}: a top-1 margin is a finite number ≥ 0"
                )));
            }
            t.flip_margin = m;
        }
        Ok(t)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompareSpec {
    /// Also run the local (overrides) view where a backend supports it.
    pub local: bool,
    /// Logit lens at the last position of every phase.
    pub lens: bool,
}

impl Default for CompareSpec {
    fn default() -> Self {
        CompareSpec { local: true, lens: true }
    }
}

impl Probe {
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::files::read_text(path, crate::files::Kind::Probe)?;
        Self::parse(&text, path)
    }

    /// A probe made on the command line (`bisect --tokens`): this checkpoint and these inputs,
    /// every tap, no backend of its own, the default thresholds.
    pub fn of_inputs(name: &str, checkpoint: CheckpointSpec, inputs: InputsSpec) -> Self {
        Probe {
            version: PROBE_VERSION,
            name: name.into(),
            question: "Where does the device start to drift?".into(),
            finding: None,
            checkpoint,
            inputs,
            taps: all_taps(),
            backends: Vec::new(),
            thresholds: ThresholdsSpec::default(),
            compare: CompareSpec::default(),
            explain: None,
            sweep: None,
            path: PathBuf::new(),
        }
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let what = path.display().to_string();
        let mut p: Probe =
            toml::from_str(text).map_err(|e| Error::input(&what, e.to_string().trim_end().to_string()))?;
        p.check(&what)?;
        p.resolve_paths(path.parent().unwrap_or(Path::new(".")));
        p.path = path.to_path_buf();
        Ok(p)
    }

    /// What serde cannot say about the tables: one of each pair of alternatives, labels,
    /// settings that only apply to a path, and the values each table bounds.
    fn check(&self, what: &str) -> Result<()> {
        let bad = |table: &str, msg: String| Err(Error::input(format!("{what} {table}"), msg));
        if self.version != PROBE_VERSION {
            return bad(
                "key `version`",
                format!(
                    "{} is not a probe schema version this hefprobe reads (it reads {PROBE_VERSION})",
                    self.version
                ),
            );
        }
        let (c, i) = (&self.checkpoint, &self.inputs);
        if c.path.is_some() == c.synth.is_some() {
            return bad(
                "[checkpoint]",
                "give exactly one of `path` (a checkpoint folder or .gguf file) or `synth` (a preset)".into(),
            );
        }
        if i.tokens.is_some() == i.text.is_some() {
            return bad("[inputs]", "give exactly one of `tokens` or `text`".into());
        }
        if i.decode.is_some() && i.decode_tokens.is_some() {
            return bad("[inputs]", "give `decode` (greedy) or `decode_tokens`, not both".into());
        }
        let mut labels: Vec<String> = vec!["reference".into()];
        for label in self.backends.iter().map(BackendSpec::label) {
            if labels.contains(&label) {
                return bad(
                    "[[backend]]",
                    format!("two backends are labelled `{label}`; give each a `name`"),
                );
            }
            labels.push(label);
        }
        if c.path.is_none() && (c.revision.is_some() || c.strict_config) {
            return bad(
                "[checkpoint]",
                "`revision` and `strict_config` apply to a checkpoint `path`, not to `synth`".into(),
            );
        }
        if let Some(bad_scope) =
            self.sweep.iter().flat_map(|s| &s.scope).find(|s| !matches!(s.as_str(), "kv" | "base"))
        {
            return bad(
                "key `sweep.scope`",
                format!("`{bad_scope}` is not a scope; use \"kv\" (KV-cache decode) or \"base\" (prefill re-run per token)"),
            );
        }
        self.thresholds.build().map_err(|e| Error::input(what, e.to_string()))?;
        c.overrides.check_in(&format!("{what} [checkpoint]"))?;
        if let Some(sw) = &self.sweep {
            sw.validate(&format!("{what} [sweep]"))?;
        }
        if i.chunk == Some(0) {
            return bad(
                "[inputs] key `chunk`",
                "is 0: a prefill chunk holds at least 1 token (leave the key out for one prefill)".into(),
            );
        }
        Ok(())
    }

    /// Paths relative to the probe's folder (`base`). A model id stays as written when no
    /// folder of that name sits beside the probe: the loader looks it up in the hub cache.
    fn resolve_paths(&mut self, base: &Path) {
        let rel = |x: &mut PathBuf| {
            if x.is_relative() {
                *x = base.join(&*x);
            }
        };
        let is_id =
            |x: &Path| x.to_str().is_some_and(crate::model::hub::is_repo_id) && !base.join(x).exists();
        let checkpoint = self.checkpoint.path.as_mut().filter(|p| !is_id(p));
        let sweep = self.sweep.iter_mut().flat_map(|s| &mut s.checkpoints);
        checkpoint.into_iter().chain(sweep).chain(self.inputs.tokenizer.as_mut()).for_each(rel);
        for b in &mut self.backends {
            b.relative_to(base);
        }
    }
}

impl SweepSpec {
    /// Every grid value usable, checked when the probe is read (a `head_dim = 0` once reached
    /// `hidden % head_dim` and panicked).
    pub fn validate(&self, what: &str) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::input(format!("{what} key `{key}`"), msg));
        if let Some(d) = self.head_dim {
            if d == 0 || d % 2 != 0 {
                return bad(
                    "head_dim",
                    format!("is {d}: RoPE rotates pairs, so a head dim is even and at least 2"),
                );
            }
        }
        if self.kv_ratio == Some(0) {
            return bad("kv_ratio", "is 0: heads / kv_heads is at least 1 (1 = no GQA)".into());
        }
        if let Some(h) = self.hidden.iter().find(|&&h| h == 0) {
            return bad("hidden", format!("holds {h}: a hidden size is at least 1"));
        }
        if let Some(n) = self.prompt_len.iter().find(|&&n| n == 0) {
            return bad("prompt_len", format!("holds {n}: a prompt holds at least 1 token"));
        }
        // The grid's size, before anything runs: every point is a model run.
        let axes = [
            ("hidden", self.hidden.len().max(self.checkpoints.len())),
            ("quant", self.quant.len()),
            ("faults", self.faults.len()),
            ("prompt_len", self.prompt_len.len()),
            ("scope", self.scope.len()),
        ];
        let points = axes.iter().fold(1usize, |n, (_, k)| n.saturating_mul((*k).max(1)));
        if points > MAX_SWEEP_POINTS {
            let sizes: Vec<String> = axes.iter().map(|(k, n)| format!("{k} {}", n.max(&1))).collect();
            return Err(Error::input(
                what.to_string(),
                format!(
                    "is a grid of {points} points ({}); one sweep runs at most {MAX_SWEEP_POINTS}: split it into \
                     several probes",
                    sizes.join(" × ")
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
version = 1
name = "t"
question = "q?"
[checkpoint]
synth = "tinystories"
[inputs]
tokens = [1, 2, 3]
"#;

    #[test]
    fn minimal_probe_parses_with_defaults() {
        let p = Probe::parse(MINIMAL, Path::new("probes/t.toml")).unwrap();
        assert_eq!(p.taps, vec!["*"]);
        assert!(p.compare.local && p.backends.is_empty());
    }

    #[test]
    fn unknown_keys_are_named() {
        let text = MINIMAL.replace("question", "questoin");
        let e = Probe::parse(&text, Path::new("p.toml")).unwrap_err().to_string();
        assert!(e.contains("p.toml") && e.contains("questoin"), "{e}");
        let text = format!("{MINIMAL}\n[thresholds.taps]\nlogits = {{ cosinus = 0.9 }}\n");
        let e = Probe::parse(&text, Path::new("p.toml")).unwrap_err().to_string();
        assert!(e.contains("cosinus") && e.contains("did you mean `cosine`"), "{e}");
    }

    #[test]
    fn checkpoint_overrides_are_read_once_and_typos_named() {
        let text = MINIMAL.replace(
            "synth = \"tinystories\"",
            "synth = \"tinystories\"\nlayers = 6\nweight_scale = 0.5\narch = \"qwen2\"",
        );
        let p = Probe::parse(&text, Path::new("p.toml")).unwrap();
        let o = &p.checkpoint.overrides;
        assert_eq!((o.layers, o.weight_scale, o.arch), (Some(6), Some(0.5), Some(crate::model::Arch::Qwen2)));
        let text = MINIMAL.replace("synth = \"tinystories\"", "synth = \"tinystories\"\nhiden = 64");
        let e = Probe::parse(&text, Path::new("p.toml")).unwrap_err().to_string();
        assert!(e.contains("p.toml") && e.contains("hiden"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_when_the_probe_is_read() {
        let cases = [
            ("synth = \"tinystories\"", "synth = \"tinystories\"\nweight_scale = nan", "weight_scale"),
            ("synth = \"tinystories\"", "synth = \"tinystories\"\nsliding_window = 0", "sliding_window"),
            ("synth = \"tinystories\"", "synth = \"tinystories\"\nintermediate = 0", "intermediate"),
            ("synth = \"tinystories\"", "synth = \"tinystories\"\nhidden = 0", "hidden"),
            ("tokens = [1, 2, 3]", "tokens = [1, 2, 3]\nchunk = 0", "chunk"),
        ];
        for (from, to, key) in cases {
            let text = MINIMAL.replace(from, to);
            let e = Probe::parse(&text, Path::new("p.toml")).unwrap_err().to_string();
            assert!(e.contains("p.toml") && e.contains(&format!("`{key}`")), "{key}: {e}");
        }
        let text = format!("{MINIMAL}\n[sweep]\nhidden = [64]\nhead_dim = 0\n");
        let e = Probe::parse(&text, Path::new("p.toml")).unwrap_err().to_string();
        assert!(e.contains("p.toml [sweep] key `head_dim`"), "{e}");
        let text = format!("{MINIMAL}\n[thresholds.default]\ncosine = nan\n");
        let e = Probe::parse(&text, Path::new("p.toml")).unwrap_err().to_string();
        assert!(e.contains("p.toml") && e.contains("cosine = NaN") && e.contains("-1 to 1"), "{e}");
        let text = format!("{MINIMAL}\n[thresholds.taps]\nlogits = {{ flips = -1 }}\n");
        let e = Probe::parse(&text, Path::new("p.toml")).unwrap_err().to_string();
        assert!(e.contains("[thresholds.taps]") && e.contains("flips = -1"), "{e}");
    }
}
