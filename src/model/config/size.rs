//! Bounds on the dimensions of config.json, checked before anything is sized by them: the
//! parameters they imply cannot take more bytes than the weight files hold (issue 11: a 2 KB
//! config.json saying `num_hidden_layers: 1000000000` aborted on allocation).

use super::reader::Reader;
use crate::error::Result;

/// What the weight files hold, to bound the dimensions config.json claims before anything is
/// sized by them (a 2 KB config.json saying `num_hidden_layers: 1000000000` must not abort).
#[derive(Debug, Clone)]
pub struct WeightBudget {
    /// Total bytes of the weight files.
    pub bytes: u64,
    /// Names them in messages ("the weight files", "model.gguf").
    pub what: String,
}

/// The smallest number of bytes a parameter takes in a file hefprobe reads (f16/bf16).
const MIN_BYTES_PER_PARAM: u128 = 2;

/// Without weight files to measure against (a config parsed alone), at most this many layers:
/// 65536 is far above any published decoder (the largest have under 200), and keeps the
/// per-layer tables this module builds under a few MB.
const MAX_LAYERS_UNBOUNDED: usize = 1 << 16;

/// The dimensions a size bound needs, as config.json gives them.
#[derive(Clone, Copy)]
pub(super) struct Dims {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub tied: bool,
}

impl Dims {
    /// A lower bound of the parameter count (the matrices and norms every architecture has;
    /// biases and q/k norms only add), or `None` when it does not fit in u128.
    fn params(&self) -> Option<u128> {
        let [h, i, l, nh, nkv, d, v] = [
            self.hidden,
            self.intermediate,
            self.layers,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.vocab,
        ]
        .map(|x| x as u128);
        let q = nh.checked_mul(d)?;
        let kv = nkv.checked_mul(d)?;
        // q and o (h·q each), k and v (h·kv each), gate/up/down (h·i each), two norms.
        let per_layer = q
            .checked_mul(2)?
            .checked_add(kv.checked_mul(2)?)?
            .checked_mul(h)?
            .checked_add(h.checked_mul(i)?.checked_mul(3)?)?
            .checked_add(h.checked_mul(2)?)?;
        let embeddings = v.checked_mul(h)?.checked_mul(if self.tied { 1 } else { 2 })?;
        l.checked_mul(per_layer)?.checked_add(embeddings)?.checked_add(h)
    }

    /// The config.json key of each dimension, its value, and the dims with it set to 1.
    fn each(&self) -> [(&'static str, usize, Dims); 7] {
        let one = |f: fn(&mut Dims)| {
            let mut d = *self;
            f(&mut d);
            d
        };
        [
            ("num_hidden_layers", self.layers, one(|d| d.layers = 1)),
            ("hidden_size", self.hidden, one(|d| d.hidden = 1)),
            ("vocab_size", self.vocab, one(|d| d.vocab = 1)),
            ("intermediate_size", self.intermediate, one(|d| d.intermediate = 1)),
            ("num_attention_heads", self.heads, one(|d| d.heads = 1)),
            ("num_key_value_heads", self.kv_heads, one(|d| d.kv_heads = 1)),
            ("head_dim", self.head_dim, one(|d| d.head_dim = 1)),
        ]
    }

    /// The key most out of line: the one whose value, set to 1, shrinks the count the most.
    fn blame(&self) -> (&'static str, usize) {
        self.each()
            .into_iter()
            .min_by_key(|(_, _, shrunk)| shrunk.params().unwrap_or(u128::MAX))
            .map(|(k, v, _)| (k, v))
            .expect("seven candidates")
    }
}

impl Reader<'_> {
    /// The dimensions, each at least 1 and consistent with the others.
    pub(super) fn dims(&mut self) -> Result<Dims> {
        let hidden_size = self.dim("hidden_size")?;
        let intermediate_size = self.dim("intermediate_size")?;
        let num_layers = self.dim("num_hidden_layers")?;
        let num_heads = self.dim("num_attention_heads")?;
        let vocab_size = self.dim("vocab_size")?;
        (self.heads, self.hidden) = (num_heads, hidden_size);
        let num_kv_heads = self.int("num_key_value_heads")?;
        let head_dim = self.int("head_dim")?;
        for (key, v) in [
            ("hidden_size", hidden_size),
            ("intermediate_size", intermediate_size),
            ("num_hidden_layers", num_layers),
            ("num_attention_heads", num_heads),
            ("num_key_value_heads", num_kv_heads),
            ("head_dim", head_dim),
            ("vocab_size", vocab_size),
        ] {
            if v == 0 {
                return Err(self.err(key, "must be at least 1"));
            }
        }
        if num_heads % num_kv_heads != 0 {
            return Err(self.err(
                "num_key_value_heads",
                format!("{num_kv_heads} does not divide num_attention_heads = {num_heads}"),
            ));
        }
        if head_dim % 2 != 0 {
            return Err(
                self.err("head_dim", format!("{head_dim} is odd; rotate-half RoPE needs an even head_dim"))
            );
        }
        Ok(Dims {
            hidden: hidden_size,
            intermediate: intermediate_size,
            layers: num_layers,
            heads: num_heads,
            kv_heads: num_kv_heads,
            head_dim,
            vocab: vocab_size,
            tied: self.flag("tie_word_embeddings")?,
        })
    }
}

/// The dimensions against what the weights can hold, before anything is sized by them.
pub(super) fn check_size(r: &Reader, dims: &Dims, budget: Option<&WeightBudget>) -> Result<()> {
    let params = dims.params();
    let (too_big, why) = match budget {
        Some(b) => {
            let need = params.and_then(|p| p.checked_mul(MIN_BYTES_PER_PARAM));
            let fits = need.is_some_and(|n| n <= b.bytes as u128);
            let need_text = need.map_or_else(|| "more than 2^128".to_string(), |n| format!("{n}"));
            let why = format!(
                "implies at least {} parameters, {need_text} bytes even at 2 bytes each (f16/bf16, \
                 the smallest dtype hefprobe reads), but the tensors in {} take {} bytes; config.json and the \
                 weights disagree",
                params.map_or_else(|| "more than 2^128".to_string(), |p| p.to_string()),
                b.what,
                b.bytes
            );
            (!fits, why)
        }
        None => {
            let fits = params.is_some() && dims.layers <= MAX_LAYERS_UNBOUNDED;
            let why = format!(
                "is beyond what hefprobe reads without weight files to check it against \
                 (at most {MAX_LAYERS_UNBOUNDED} layers and a parameter count that fits in 128 bits)"
            );
            (!fits, why)
        }
    };
    if too_big {
        let (key, value) = if budget.is_none() && dims.layers > MAX_LAYERS_UNBOUNDED {
            ("num_hidden_layers", dims.layers)
        } else {
            dims.blame()
        };
        return Err(r.err(key, format!("{value} {why}")));
    }
    Ok(())
}
