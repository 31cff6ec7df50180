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
                let mut out = Vec::new();
                let mut start = 0;
                let rem = n % c;
                if rem != 0 {
                    out.push(rem);
                }
                out.extend(std::iter::repeat_n(c, n / c));
                out.into_iter()
                    .enumerate()
                    .map(|(i, len)| {
                        let r = start..start + len;
                        start += len;
                        (Phase::PrefillChunk(i), r)
                    })
                    .collect()
            }
        }
    }

    /// Total positions the run occupies.
    pub fn total_len(&self) -> usize {
        self.prompt.len() + self.decode.steps()
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
        for &id in ids {
            if id as usize >= vocab {
                return Err(Error::usage(format!(
                    "token id {id} is out of range: the vocabulary has {vocab} tokens (ids 0..{})",
                    vocab - 1
                )));
            }
        }
        let last = self.start_position + self.total_len();
        if last > max_positions {
            return Err(Error::usage(format!(
                "the run needs positions up to {last} ({} prompt + {} decode tokens from position {}), \
                 longer than max_position_embeddings = {max_positions}",
                self.prompt.len(),
                self.decode.steps(),
                self.start_position
            )));
        }
        Ok(())
    }

    /// Write the InputSet as `.npz` so a device host can replay it (`hefprobe capture`).
    pub fn to_npz(&self, path: &std::path::Path) -> Result<()> {
        use ndarray::Array1;
        let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
        let mut w = ndarray_npy::NpzWriter::new(file);
        let err = |e: ndarray_npy::WriteNpzError| Error::input(path.display().to_string(), e.to_string());
        w.add_array("prompt", &Array1::from(self.prompt.iter().map(|&t| t as i64).collect::<Vec<_>>()))
            .map_err(err)?;
        let (greedy, forced) = match &self.decode {
            DecodeSpec::Greedy(n) => (*n as i64, vec![]),
            DecodeSpec::Forced(t) => (-1, t.iter().map(|&t| t as i64).collect()),
        };
        w.add_array("decode_tokens", &Array1::from(forced)).map_err(err)?;
        w.add_array("greedy_steps", &Array1::from(vec![greedy])).map_err(err)?;
        w.add_array("chunk", &Array1::from(vec![self.chunk.map_or(0, |c| c as i64)])).map_err(err)?;
        w.add_array("start_position", &Array1::from(vec![self.start_position as i64])).map_err(err)?;
        w.finish().map_err(err)?;
        Ok(())
    }

    pub fn from_npz(path: &std::path::Path) -> Result<Self> {
        let what = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut r =
            ndarray_npy::NpzReader::new(file).map_err(|e| Error::input(&what, format!("not an npz: {e}")))?;
        let mut get = |name: &str| -> Result<Vec<i64>> {
            r.by_name::<ndarray::OwnedRepr<i64>, ndarray::Ix1>(name).map(|a| a.to_vec()).map_err(|e| {
                Error::input(&what, format!("array `{name}` (int64, 1-D) is missing or wrong: {e}"))
            })
        };
        let to_u32 = |v: Vec<i64>, name: &str| -> Result<Vec<u32>> {
            v.into_iter()
                .map(|x| {
                    u32::try_from(x)
                        .map_err(|_| Error::input(&what, format!("`{name}` holds {x}, not a token id")))
                })
                .collect()
        };
        let prompt = to_u32(get("prompt")?, "prompt")?;
        let forced = to_u32(get("decode_tokens")?, "decode_tokens")?;
        let greedy = get("greedy_steps")?.first().copied().unwrap_or(-1);
        let chunk = get("chunk")?.first().copied().unwrap_or(0);
        let start = get("start_position")?.first().copied().unwrap_or(0);
        Ok(InputSet {
            prompt,
            chunk: (chunk > 0).then_some(chunk as usize),
            decode: if greedy >= 0 {
                DecodeSpec::Greedy(greedy as usize)
            } else {
                DecodeSpec::Forced(forced)
            },
            start_position: start.max(0) as usize,
            bos_added: None,
        })
    }
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
        s.to_npz(&dir.path().join("i.npz")).unwrap();
        let back = InputSet::from_npz(&dir.path().join("i.npz")).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn too_long_and_bad_ids_are_refused() {
        let s = InputSet::new(vec![1, 2, 300]);
        assert!(s.validate(256, 100).unwrap_err().to_string().contains("token id 300"));
        let s = InputSet::new(vec![1; 50]);
        assert!(s.validate(256, 40).unwrap_err().to_string().contains("max_position_embeddings"));
    }
}
