//! What names a backend: its kind (typed) and where its data comes from, as a probe's
//! `[[backend]]` table or a `--backend` flag gives it.

use crate::device::SimProfile;
use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;

crate::named_enum! {
    /// The kinds of backend. Matched as an enum everywhere, parsed from text in one place.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum BackendKind {
        /// The float32 decoder.
        #[default]
        Reference = "reference",
        /// The decoder with fault models and quantization.
        Emulator = "emulator",
        /// An `.npz` recorded elsewhere, with an optional name map.
        Dump = "dump",
        /// A HEF on a device (simulated or a real Hailo-10H).
        Hef = "hef",
        /// A served model: hailo-ollama, an OpenAI-style server, genai's `LLM` object.
        Serve = "serve",
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

crate::named_enum! {
    /// How a server is spoken to.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Api {
        /// hailo-ollama's `/api/generate` (streamed NDJSON; it applies its chat template).
        Ollama = "ollama",
        /// `/v1/completions` of llama.cpp's server, llama-cpp-python's, vLLM (a raw prompt;
        /// top log-probabilities).
        Openai = "openai",
        /// An object with genai `LLM`'s `generate`/`tokenize`/`clear_context`, from Python.
        Llm = "llm",
    }
}

/// A backend as a probe names it (and as a reduced probe writes it back).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    /// Label in reports (default: the kind).
    pub name: Option<String>,
    /// reference | emulator | dump | hef
    pub kind: BackendKind,
    /// emulator: fault specs, `NAME[:PARAMS][@layers=RANGE]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultSpec>,
    /// emulator: quantization setting (see `hefprobe explain --help`): `w8a16`, or `quant:...`.
    #[serde(default, deserialize_with = "crate::fault::spec::de_quantization")]
    pub quant: Option<FaultSpec>,
    /// dump: the .npz; hef: the .hef.
    pub path: Option<PathBuf>,
    /// dump: name map TOML (their name -> canonical tap); hef: output map (output name -> tap,
    /// also spelled `output_map`).
    #[serde(alias = "output_map")]
    pub map: Option<PathBuf>,
    /// hef: the simulated device for a simulated HEF, `sim` (default) or `sim-h10`.
    #[serde(default, deserialize_with = "de_sim_profile")]
    pub device: Option<SimProfile>,
    /// hef: the label of a dump backend of the same probe holding the DFC emulator's inference
    /// of this HEF: the device is also compared with it, so its excess over the emulator shows.
    pub beside: Option<String>,
    /// hef: the block a compiled suffix HEF starts at (its first input is the hidden state
    /// entering it; a simulated HEF says so itself).
    pub first_layer: Option<usize>,
    /// dump: the HEF it was captured from. Its quantization (its quant infos, and its recorded
    /// or declared `quant`) is what the dump is judged beyond, as a `hef` backend is.
    pub hef: Option<PathBuf>,
    /// hef: the network group to run (a prefill group with its tbt partner, or a cache-less
    /// base-scope group alone); genai's choice when absent.
    pub group: Option<String>,
    /// dump: the widths of the logits' shards, in output order (e.g. [16002, 16003]), when the
    /// dump was captured from a HEF with a sharded lm_head; a `hef` backend reads its own.
    pub shards: Option<Vec<usize>>,
    /// serve: the server, `http://HOST:PORT`.
    pub url: Option<String>,
    /// serve: how it is spoken to, `ollama` (default: hailo-ollama) or `openai`.
    pub api: Option<Api>,
    /// serve: the served model's name (default: the server's only one).
    pub model: Option<String>,
    /// serve: the chat template the server applies (a Jinja file, a tokenizer_config.json or
    /// hailo-config.json, a .hef), when the checkpoint's is not it or it has none.
    pub template: Option<PathBuf>,
    /// serve (openai): how many top log-probabilities to ask for per token (KLD, same top-1).
    pub logprobs: Option<usize>,
    /// serve: the longest the server may stay silent, in seconds (default 60).
    pub timeout: Option<f64>,
}

impl BackendSpec {
    pub fn new(kind: BackendKind) -> Self {
        BackendSpec { kind, ..Default::default() }
    }

    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| match (self.kind, self.faults.is_empty()) {
            (BackendKind::Emulator, false) => {
                format!("emulator[{}]", crate::fault::spec::join(&self.faults, ","))
            }
            _ => self.kind.to_string(),
        })
    }

    /// From the command line: `emulator`, `emulator=FAULT+FAULT`,
    /// `dump=PATH[,map=MAP][,hef=HEF][,shards=W+W]`,
    /// `hef=PATH[,map=OUTPUT_MAP][,beside=DUMP][,first_layer=K][,device=sim|sim-h10][,group=NAME]`,
    /// `serve=URL[,api=ollama|openai][,model=NAME][,template=PATH][,logprobs=N][,timeout=S]`.
    pub fn parse_cli(s: &str) -> Result<Self> {
        let (kind_text, rest) = s.split_once('=').unwrap_or((s, ""));
        let kind = BackendKind::from_name(kind_text).ok_or_else(|| {
            Error::usage(format!(
                "--backend `{kind_text}`: expected reference, emulator[=FAULT+FAULT], \
                 dump=PATH[,map=MAP][,hef=HEF][,shards=W+W], \
                 hef=PATH[,map=OUTPUT_MAP][,beside=DUMP][,first_layer=K][,device=sim|sim-h10][,group=NAME] or \
                 serve=URL[,api=ollama|openai][,model=NAME][,template=PATH][,logprobs=N][,timeout=S]"
            ))
        })?;
        let mut spec = BackendSpec::new(kind);
        match kind {
            BackendKind::Reference => {}
            BackendKind::Emulator => {
                spec.faults =
                    rest.split('+').filter(|f| !f.is_empty()).map(FaultSpec::parse).collect::<Result<_>>()?;
            }
            BackendKind::Serve => spec.parse_serve(s, rest)?,
            BackendKind::Dump | BackendKind::Hef => {
                let mut parts = rest.split(',');
                let path = parts.next().filter(|p| !p.is_empty()).ok_or_else(|| {
                    Error::usage(format!("--backend {kind}=PATH: give the {kind} file's path"))
                })?;
                spec.path = Some(PathBuf::from(path));
                for p in parts {
                    match p.split_once('=') {
                        Some(("map", m)) => spec.map = Some(PathBuf::from(m)),
                        Some(("hef", h)) if kind == BackendKind::Dump => spec.hef = Some(PathBuf::from(h)),
                        Some(("beside", b)) if kind == BackendKind::Hef => spec.beside = Some(b.to_string()),
                        Some(("first_layer", k)) if kind == BackendKind::Hef => {
                            spec.first_layer = Some(k.parse().map_err(|e| {
                                Error::usage(format!("--backend {s}: first_layer `{k}`: {e}"))
                            })?)
                        }
                        Some(("device", d)) if kind == BackendKind::Hef => {
                            spec.device = Some(SimProfile::parse(d)?)
                        }
                        Some(("group", g)) if kind == BackendKind::Hef && !g.is_empty() => {
                            spec.group = Some(g.to_string())
                        }
                        Some(("shards", w)) if kind == BackendKind::Dump => {
                            spec.shards = Some(
                                parse_shards(w).map_err(|e| Error::usage(format!("--backend {s}: {e}")))?,
                            )
                        }
                        _ => return Err(Error::usage(format!("--backend {s}: unknown option `{p}`"))),
                    }
                }
            }
        }
        Ok(spec)
    }

    /// The logits' shard widths a dump declares, checked (`shards`).
    pub fn shard_widths(&self) -> Result<Option<Vec<usize>>> {
        match &self.shards {
            Some(w) if w.len() < 2 || w.len() > MAX_SHARDS || w.contains(&0) || shards_total(w).is_none() => {
                Err(Error::usage(format!(
                    "backend `{}`: shards = {w:?}: give the width of each of 2 to {MAX_SHARDS} shards, in output \
                     order, adding up to the vocabulary",
                    self.label()
                )))
            }
            w => Ok(w.clone()),
        }
    }

    /// `serve=URL[,api=…][,model=…][,template=…][,logprobs=N][,timeout=S]` (`s` the whole flag).
    fn parse_serve(&mut self, s: &str, rest: &str) -> Result<()> {
        let mut parts = rest.split(',');
        let url = parts.next().filter(|u| !u.is_empty()).ok_or_else(|| {
            Error::usage("--backend serve=URL: give the server's address, e.g. serve=http://127.0.0.1:8000")
        })?;
        self.url = Some(url.to_string());
        let number = |k: &str, v: &str| Error::usage(format!("--backend {s}: {k} `{v}` is not a number"));
        for p in parts {
            match p.split_once('=') {
                Some(("api", a)) => {
                    self.api = Some(Api::from_name(a).filter(|a| *a != Api::Llm).ok_or_else(|| {
                        Error::usage(format!(
                            "--backend {s}: api `{a}`: ollama (hailo-ollama) or openai (/v1/completions)"
                        ))
                    })?)
                }
                Some(("model", m)) => self.model = Some(m.to_string()),
                Some(("template", t)) => self.template = Some(PathBuf::from(t)),
                Some(("logprobs", n)) => self.logprobs = Some(n.parse().map_err(|_| number("logprobs", n))?),
                Some(("timeout", t)) => self.timeout = Some(t.parse().map_err(|_| number("timeout", t))?),
                _ => return Err(Error::usage(format!("--backend {s}: unknown option `{p}`"))),
            }
        }
        self.check_serve(&format!("--backend {s}"))
    }

    /// A serve backend's settings, wherever they were written (`what`): bounded numbers.
    pub fn check_serve(&self, what: &str) -> Result<()> {
        if let Some(t) = self.timeout.filter(|t| !(t.is_finite() && *t > 0.0 && *t <= 86_400.0)) {
            return Err(Error::usage(format!(
                "{what}: timeout {t}: give seconds, more than 0 and at most a day"
            )));
        }
        if let Some(n) = self.logprobs.filter(|n| !(1..=100).contains(n)) {
            return Err(Error::usage(format!(
                "{what}: logprobs {n}: ask for 1 to 100 top log-probabilities"
            )));
        }
        if self.logprobs.is_some() && self.api != Some(Api::Openai) {
            return Err(Error::usage(format!(
                "{what}: logprobs needs api=openai (hailo-ollama returns none)"
            )));
        }
        Ok(())
    }

    /// The backends a command line gives: `--backend SPEC`s, then one emulator with the
    /// `--fault`s when there are any (the command line's and the Python module's door).
    pub fn from_flags(backends: &[String], faults: &[String]) -> Result<Vec<BackendSpec>> {
        let mut specs: Vec<BackendSpec> =
            backends.iter().map(|b| Self::parse_cli(b)).collect::<Result<_>>()?;
        if !faults.is_empty() {
            let mut b = BackendSpec::new(BackendKind::Emulator);
            b.faults = crate::fault::spec::parse_all(faults)?;
            specs.push(b);
        }
        Ok(specs)
    }

    /// What explain observes (its door): a capture recorded anywhere (`observed`, with its name
    /// map and the HEF it came from), else a `--backend` spec, else nothing given.
    pub fn observed(
        observed: Option<PathBuf>,
        map: Option<PathBuf>,
        hef: Option<PathBuf>,
        backend: Option<&str>,
    ) -> Result<Option<Self>> {
        Ok(match observed {
            Some(p) => Some(BackendSpec {
                name: Some("observed".into()),
                path: Some(p),
                map,
                hef,
                ..BackendSpec::new(BackendKind::Dump)
            }),
            None => backend.map(BackendSpec::parse_cli).transpose()?,
        })
    }

    /// Every path the spec names, to rewrite in place (a bundle records them absolute).
    pub fn paths_mut(&mut self) -> impl Iterator<Item = &mut PathBuf> {
        [&mut self.path, &mut self.map, &mut self.hef, &mut self.template].into_iter().flatten()
    }

    /// Paths relative to `base` (the folder of the probe or suite that names them).
    pub fn relative_to(&mut self, base: &std::path::Path) {
        for p in self.paths_mut() {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// The file a dump or hef backend reads.
    pub fn path(&self) -> Result<&std::path::Path> {
        self.path.as_deref().ok_or_else(|| {
            Error::usage(format!("backend `{}`: a {} backend needs `path`", self.label(), self.kind))
        })
    }
}

/// The spec as `--backend` writes it ([`BackendSpec::parse_cli`] reads it back the same; a
/// probe's `name` and an emulator's `quant` have no words there and are left out).
impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let head = match self.kind {
            BackendKind::Reference => None,
            BackendKind::Emulator => {
                Some(crate::fault::spec::join(&self.faults, "+")).filter(|f| !f.is_empty())
            }
            BackendKind::Dump | BackendKind::Hef => path(&self.path),
            BackendKind::Serve => self.url.clone(),
        };
        let words = [
            ("map", path(&self.map)),
            ("hef", path(&self.hef)),
            (
                "shards",
                self.shards.as_ref().map(|w| w.iter().map(ToString::to_string).collect::<Vec<_>>().join("+")),
            ),
            ("beside", self.beside.clone()),
            ("first_layer", self.first_layer.map(|k| k.to_string())),
            ("device", self.device.map(|d| d.name().to_string())),
            ("group", self.group.clone()),
            ("api", self.api.map(|a| a.name().to_string())),
            ("model", self.model.clone()),
            ("template", path(&self.template)),
            ("logprobs", self.logprobs.map(|n| n.to_string())),
            ("timeout", self.timeout.map(|t| t.to_string())),
        ];
        if let Some(h) = head {
            write!(f, "={h}")?;
        }
        for (k, v) in words.iter().filter_map(|(k, v)| Some((k, v.as_ref()?))) {
            write!(f, ",{k}={v}")?;
        }
        Ok(())
    }
}

/// Backend specs as text (`--backend`'s words), for a bundle's record: one parser reads them.
pub mod as_text {
    use super::BackendSpec;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(specs: &[BackendSpec], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(specs.iter().map(ToString::to_string))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<BackendSpec>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts.iter().map(|t| BackendSpec::parse_cli(t).map_err(serde::de::Error::custom)).collect()
    }
}

/// A probe's `device = "sim-h10"`, named as `--backend ...,device=` names it when wrong.
fn de_sim_profile<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<SimProfile>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| SimProfile::parse(&s).map_err(serde::de::Error::custom))
        .transpose()
}

/// Shard widths as a command line writes them: `16002+16003` or `16002,16003`.
pub fn parse_shards(text: &str) -> Result<Vec<usize>> {
    let widths: Vec<usize> = text
        .split(['+', ','])
        .map(|w| {
            w.trim().parse::<usize>().ok().filter(|&w| w > 0).ok_or_else(|| {
                Error::usage(format!("shards `{text}`: `{w}` is not a width (a whole number above 0)"))
            })
        })
        .collect::<Result<_>>()?;
    if widths.len() < 2 || widths.len() > MAX_SHARDS {
        return Err(Error::usage(format!(
            "shards `{text}`: give 2 to {MAX_SHARDS} widths in output order, e.g. 16002+16003"
        )));
    }
    if shards_total(&widths).is_none() {
        return Err(Error::usage(format!("shards `{text}`: the widths add up past any vocabulary")));
    }
    Ok(widths)
}

/// The columns shard widths cover together; None where the sum overflows (widths from input).
pub fn shards_total(widths: &[usize]) -> Option<usize> {
    widths.iter().try_fold(0usize, |t, &w| t.checked_add(w))
}

/// The most shards a logits vector is split into (Qwen's 151936 columns take 5 at the
/// exporter's 32000 per shard; HailoRT's official Qwen2.5-1.5B HEF has 4).
pub const MAX_SHARDS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_backend_specs() {
        let b = BackendSpec::parse_cli("emulator=shared-softmax+rope:interleaved@layers=1").unwrap();
        let texts: Vec<String> = b.faults.iter().map(ToString::to_string).collect();
        assert_eq!(texts, vec!["shared-softmax", "rope:interleaved@layers=1"]);
        let b = BackendSpec::parse_cli("dump=d.npz,map=m.toml").unwrap();
        assert_eq!((b.path.unwrap(), b.map.unwrap()), (PathBuf::from("d.npz"), PathBuf::from("m.toml")));
        assert!(BackendSpec::parse_cli("gpu").is_err());
        let b = BackendSpec::parse_cli("hef=m.hef,device=sim-h10").unwrap();
        assert_eq!(b.device, Some(SimProfile::SimH10));
        assert!(BackendSpec::parse_cli("hef=m.hef,device=h8").is_err());
        assert!(BackendSpec::parse_cli("dump=d.npz,device=sim").is_err());
        assert_eq!(BackendSpec::parse_cli("hef=m.hef,first_layer=4").unwrap().first_layer, Some(4));
        assert_eq!(
            BackendSpec::parse_cli("hef=m.hef,group=ts__prefill").unwrap().group.as_deref(),
            Some("ts__prefill")
        );
        assert!(BackendSpec::parse_cli("hef=m.hef,group=").is_err());
        assert!(BackendSpec::parse_cli("dump=d.npz,group=x").is_err());
        assert_eq!(
            BackendSpec::parse_cli("dump=d.npz,shards=16002+16003").unwrap().shards,
            Some(vec![16002, 16003])
        );
        assert!(BackendSpec::parse_cli("dump=d.npz,shards=16002").is_err());
        assert!(BackendSpec::parse_cli("dump=d.npz,shards=0+3").is_err());
        assert!(BackendSpec::parse_cli("dump=d.npz,shards=18446744073709551615+1").is_err());
        let mut toml = BackendSpec::parse_cli("dump=d.npz").unwrap();
        toml.shards = Some(vec![usize::MAX, 1]);
        assert_eq!(toml.shard_widths().unwrap_err().exit_code(), 2, "a probe's shards past usize");
        assert!(BackendSpec::parse_cli("hef=m.hef,first_layer=x").is_err());
        let b =
            BackendSpec::parse_cli("serve=http://127.0.0.1:8000,api=openai,model=q:1.5b,logprobs=5").unwrap();
        assert_eq!(
            (b.url.as_deref(), b.api, b.model.as_deref(), b.logprobs),
            (
                Some("http://127.0.0.1:8000"),
                Some(crate::backend::serve::Api::Openai),
                Some("q:1.5b"),
                Some(5)
            )
        );
        // What `--backend` writes, the spec writes back word for word (a bundle records it so).
        for text in [
            "reference",
            "emulator",
            "emulator=shared-softmax+rope:interleaved@layers=1",
            "dump=d.npz,map=m.toml,hef=m.hef,shards=16002+16003",
            "hef=m.hef,map=o.toml,beside=dfc,first_layer=4,device=sim-h10,group=ts__prefill",
            "serve=http://127.0.0.1:8000,api=openai,model=q:1.5b,template=t.jinja,logprobs=5,timeout=2.5",
        ] {
            assert_eq!(BackendSpec::parse_cli(text).unwrap().to_string(), text);
        }
        for bad in [
            "serve=",
            "serve=http://x:1,api=llm",
            "serve=http://x:1,timeout=0",
            "serve=http://x:1,logprobs=5",
            "serve=http://x:1,path=p",
        ] {
            assert_eq!(BackendSpec::parse_cli(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
    }
}
