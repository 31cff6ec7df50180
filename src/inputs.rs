//! The InputSet: one set of inputs handed unchanged to every backend (token ids, prefill
//! chunking, decode steps). Greedy decoding is resolved once, by the reference, and then
//! teacher-forced into every other backend so all of them see identical tokens.
//!
//! A plain type at the bottom of the house: the model, the fault core, every backend and the
//! device driver take it, so it depends on nothing but tap names and errors.

use crate::error::{Error, Result};
use crate::tap::Phase;
use std::ops::Range;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeSpec {
    /// Greedy steps: each step feeds the argmax (first maximum) of the previous logits.
    Greedy(usize),
    /// Teacher-forced: step K feeds token K.
    Forced(Vec<u32>),
}

impl DecodeSpec {
    pub fn steps(&self) -> usize {
        match self {
            DecodeSpec::Greedy(n) => *n,
            DecodeSpec::Forced(t) => t.len(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InputSet {
    pub prompt: Vec<u32>,
    /// Prefill chunk size; `None` runs the prompt as one `prefill` phase.
    pub chunk: Option<usize>,
    pub decode: DecodeSpec,
    /// Absolute position of the first prompt token.
    pub start_position: usize,
    /// Whether the tokenizer added a BOS (None when token ids were given directly).
    pub bos_added: Option<bool>,
    /// The user message `prompt` is a chat template of, when it is one: what a server that
    /// applies its own template (hailo-ollama) is sent, where others are sent the prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl InputSet {
    /// One line saying whether a BOS was added (finding 6: say it, always).
    pub fn bos_note(&self) -> &'static str {
        match self.bos_added {
            None => "token ids given directly",
            Some(true) => "tokenizer ADDED a BOS, which HailoRT's server would not",
            Some(false) => "no BOS added, as HailoRT's server tokenizes",
        }
    }

    pub fn new(prompt: Vec<u32>) -> Self {
        InputSet {
            prompt,
            chunk: None,
            decode: DecodeSpec::Forced(Vec::new()),
            start_position: 0,
            bos_added: None,
            message: None,
        }
    }

    /// Prefill phases with the prompt range each covers. Chunks are cut remainder first,
    /// then full chunks, as HailoRT's LLM server feeds a long prompt
    /// (hailort_server/genai/llm/llm_server.cpp).
    pub fn prefill_phases(&self) -> Vec<(Phase, Range<usize>)> {
        let n = self.prompt.len();
        match self.chunk {
            None => vec![(Phase::Prefill, 0..n)],
            Some(c) => {
                let mut end = 0;
                let mut cut = |len| {
                    end += len;
                    end - len..end
                };
                chunks(n, c)
                    .into_iter()
                    .enumerate()
                    .map(|(i, len)| (Phase::PrefillChunk(i), cut(len)))
                    .collect()
            }
        }
    }

    /// Total positions the run occupies (saturating: a count too large to add up is as large
    /// as a count gets, so every bound it is compared with refuses it).
    pub fn total_len(&self) -> usize {
        self.prompt.len().saturating_add(self.decode.steps())
    }

    /// One past the last absolute position the run writes, or `None` when that does not fit
    /// in a `usize` (a start position or decode count near the type's limit).
    pub fn end_position(&self) -> Option<usize> {
        self.prompt.len().checked_add(self.decode.steps())?.checked_add(self.start_position)
    }

    pub fn validate(&self, vocab: usize, max_positions: usize) -> Result<()> {
        if self.prompt.is_empty() {
            return Err(Error::usage("the prompt is empty: give at least one token"));
        }
        if self.chunk == Some(0) {
            return Err(Error::usage("prefill chunk size must be at least 1"));
        }
        let ids = self.prompt.iter().chain(match &self.decode {
            DecodeSpec::Forced(t) => t.as_slice(),
            DecodeSpec::Greedy(_) => &[],
        });
        if let Some(id) = ids.copied().find(|&id| id as usize >= vocab) {
            return Err(Error::usage(format!(
                "token id {id} is out of range: the vocabulary has {vocab} tokens (ids 0..{})",
                vocab - 1
            )));
        }
        self.past_positions(max_positions).map_or(Ok(()), |m| Err(Error::usage(m)))
    }

    /// Why the run does not fit `max_positions`, if it does not. No flag or key is named: each
    /// command that reads inputs says which of its own set them (synth-hef has none).
    pub fn past_positions(&self, max_positions: usize) -> Option<String> {
        // Checked: a start position or decode count near usize::MAX wrapped this sum to a
        // small number once, and the run then decoded forever.
        let last = self.end_position();
        if last.is_some_and(|last| last <= max_positions) {
            return None;
        }
        let needs = match last {
            Some(l) => format!("needs positions up to {l}"),
            None => "needs more positions than a position index holds (the sum overflows)".to_string(),
        };
        Some(format!(
            "the run {needs}: {} prompt tokens + {} decode steps from position {}, longer than \
             max_position_embeddings = {max_positions}",
            self.prompt.len(),
            self.decode.steps(),
            self.start_position
        ))
    }

    /// Write the InputSet as `.npz` so a device host can replay it (`hefprobe capture`).
    /// `chunk` is empty when the prompt is not chunked, `greedy_steps` is -1 when decode
    /// tokens are forced.
    pub fn to_npz(&self, path: &std::path::Path, announce: bool) -> Result<()> {
        use ndarray::Array1;
        let (out, mut w) = crate::capture::create_npz(path)?;
        let i64s = |v: &[u32]| Array1::from(v.iter().map(|&t| i64::from(t)).collect::<Vec<_>>());
        w.add("prompt", &i64s(&self.prompt))?;
        let (greedy, forced) = match &self.decode {
            DecodeSpec::Greedy(n) => (count(*n, "decode steps", path)?, vec![]),
            DecodeSpec::Forced(t) => (-1, t.clone()),
        };
        w.add("decode_tokens", &i64s(&forced))?;
        w.add("greedy_steps", &Array1::from(vec![greedy]))?;
        let chunk: Vec<i64> = self.chunk.map(|c| count(c, "chunk", path)).transpose()?.into_iter().collect();
        w.add("chunk", &Array1::from(chunk))?;
        w.add("start_position", &Array1::from(vec![count(self.start_position, "start position", path)?]))?;
        crate::capture::close_npz(w, out, announce)
    }

    /// Read an InputSet file. Everything in it is checked here, before a device is opened:
    /// a missing or mistyped array, an empty prompt, a chunk ≤ 0, a negative count.
    pub fn from_npz(path: &std::path::Path) -> Result<Self> {
        let what = path.display().to_string();
        let file = crate::files::open(path)?;
        let mut r =
            ndarray_npy::NpzReader::new(file).map_err(|e| Error::input(&what, format!("not an npz: {e}")))?;
        let mut get = |name: &str| -> Result<Vec<i64>> {
            r.by_name::<ndarray::OwnedRepr<i64>, ndarray::Ix1>(name).map(|a| a.to_vec()).map_err(|e| {
                Error::input(&what, format!("array `{name}` (int64, 1-D) is missing or wrong: {e}"))
            })
        };
        let key = |name: &str| format!("{what} array `{name}`");
        let to_u32 = |v: Vec<i64>, name: &str| -> Result<Vec<u32>> {
            v.into_iter()
                .map(|x| {
                    u32::try_from(x)
                        .map_err(|_| Error::input(key(name), format!("holds {x}, not a token id")))
                })
                .collect()
        };
        let scalar = |v: Vec<i64>, name: &str| -> Result<Option<i64>> {
            match v.as_slice() {
                [] => Ok(None),
                [x] => Ok(Some(*x)),
                _ => Err(Error::input(key(name), format!("holds {} values; it takes one", v.len()))),
            }
        };
        let prompt = to_u32(get("prompt")?, "prompt")?;
        if prompt.is_empty() {
            return Err(Error::input(key("prompt"), "is empty: an InputSet needs at least one prompt token"));
        }
        let forced = to_u32(get("decode_tokens")?, "decode_tokens")?;
        let greedy = scalar(get("greedy_steps")?, "greedy_steps")?.unwrap_or(-1);
        let chunk = match scalar(get("chunk")?, "chunk")? {
            None => None,
            Some(c) if c > 0 => {
                Some(usize::try_from(c).map_err(|_| Error::input(key("chunk"), "is too large"))?)
            }
            Some(c) => {
                return Err(Error::input(
                    key("chunk"),
                    format!(
                        "is {c}: a prefill chunk holds at least 1 token (an empty array means no chunking)"
                    ),
                ))
            }
        };
        let start = scalar(get("start_position")?, "start_position")?.unwrap_or(0);
        let start = usize::try_from(start)
            .map_err(|_| Error::input(key("start_position"), format!("is {start}; positions start at 0")))?;
        let decode = match greedy {
            -1 => DecodeSpec::Forced(forced),
            n if n >= 0 => DecodeSpec::Greedy(
                usize::try_from(n).map_err(|_| Error::input(key("greedy_steps"), "is too large"))?,
            ),
            n => {
                return Err(Error::input(
                    key("greedy_steps"),
                    format!("is {n}: give a step count ≥ 0, or -1 when decode_tokens are forced"),
                ))
            }
        };
        let inputs = InputSet { prompt, chunk, decode, start_position: start, ..InputSet::new(Vec::new()) };
        if inputs.end_position().is_none() {
            return Err(Error::input(&what, "start_position + prompt + decode steps overflows"));
        }
        Ok(inputs)
    }
}

/// Prefill chunk sizes: the remainder first, then full chunks of p
/// (`get_next_token_prefill`, llm_server.cpp:782-807).
pub fn chunks(len: usize, p: usize) -> Vec<usize> {
    let remainder = (!len.is_multiple_of(p)).then_some(len % p);
    remainder.into_iter().chain(std::iter::repeat_n(p, len / p)).collect()
}

fn count(n: usize, what: &str, path: &std::path::Path) -> Result<i64> {
    i64::try_from(n)
        .map_err(|_| Error::input(path.display().to_string(), format!("{what} {n} does not fit in int64")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_remainder_first() {
        let mut s = InputSet::new((0..12).collect());
        s.chunk = Some(5);
        let p = s.prefill_phases();
        assert_eq!(
            p,
            vec![
                (Phase::PrefillChunk(0), 0..2),
                (Phase::PrefillChunk(1), 2..7),
                (Phase::PrefillChunk(2), 7..12)
            ]
        );
        s.chunk = Some(4);
        assert_eq!(s.prefill_phases().len(), 3);
        assert_eq!(s.prefill_phases()[0].1, 0..4);
    }

    #[test]
    fn npz_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = InputSet::new(vec![3, 4, 5]);
        s.chunk = Some(2);
        s.decode = DecodeSpec::Forced(vec![7, 8]);
        s.to_npz(&dir.path().join("i.npz"), false).unwrap();
        let back = InputSet::from_npz(&dir.path().join("i.npz")).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn unchunked_greedy_round_trip_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = InputSet::new(vec![3, 4, 5]);
        s.decode = DecodeSpec::Greedy(4);
        s.start_position = 2;
        let p = dir.path().join("i.npz");
        s.to_npz(&p, false).unwrap();
        assert_eq!(InputSet::from_npz(&p).unwrap(), s);
        let write = |prompt: Vec<i64>, chunk: Vec<i64>, greedy: i64| {
            use ndarray::Array1;
            let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&p).unwrap());
            w.add_array("prompt", &Array1::from(prompt)).unwrap();
            w.add_array("decode_tokens", &Array1::<i64>::from(vec![])).unwrap();
            w.add_array("greedy_steps", &Array1::from(vec![greedy])).unwrap();
            w.add_array("chunk", &Array1::from(chunk)).unwrap();
            w.add_array("start_position", &Array1::from(vec![0i64])).unwrap();
            w.finish().unwrap();
        };
        write(vec![], vec![], 0);
        let e = InputSet::from_npz(&p).unwrap_err().to_string();
        assert!(e.contains("`prompt`") && e.contains("empty"), "{e}");
        for c in [0, -3] {
            write(vec![1, 2], vec![c], 0);
            let e = InputSet::from_npz(&p).unwrap_err().to_string();
            assert!(e.contains("`chunk`") && e.contains(&format!("is {c}")), "{e}");
        }
        write(vec![1, 2], vec![], -5);
        assert!(InputSet::from_npz(&p).unwrap_err().to_string().contains("`greedy_steps`"));
    }

    #[test]
    fn positions_that_overflow_are_refused_not_wrapped() {
        let mut s = InputSet::new(vec![1, 2]);
        s.decode = DecodeSpec::Greedy(usize::MAX);
        let e = s.validate(256, 256).unwrap_err().to_string();
        // The inputs name no flag: synth-hef's calibration runs hit this too, and has no --decode.
        assert!(e.contains("overflows") && !e.contains("--"), "{e}");
        let mut s = InputSet::new(vec![1, 2]);
        s.start_position = usize::MAX;
        let e = s.validate(256, 256).unwrap_err().to_string();
        assert!(e.contains("overflows") && e.contains("from position"), "{e}");
        s.start_position = i64::MAX as usize;
        s.decode = DecodeSpec::Greedy(i64::MAX as usize);
        assert!(s.validate(256, 256).is_err());
    }

    #[test]
    fn too_long_and_bad_ids_are_refused() {
        let s = InputSet::new(vec![1, 2, 300]);
        assert!(s.validate(256, 100).unwrap_err().to_string().contains("token id 300"));
        let s = InputSet::new(vec![1; 50]);
        assert!(s.validate(256, 40).unwrap_err().to_string().contains("max_position_embeddings"));
    }
}
