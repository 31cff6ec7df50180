//! Checkpoint weights: `model.safetensors` or a sharded `model.safetensors.index.json`,
//! f32/f16/bf16 on disk, held as f32 tensors keyed by their HF checkpoint names.

use crate::error::{Error, Result};
use crate::files::{read_text, Kind};
use crate::model::config::{ModelConfig, WeightBudget};
use candle_core::{DType, Device, Tensor};
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::Xxh3;

/// Every tensor the architecture needs, with its shape, in checkpoint order.
pub fn expected_tensors(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (h, i, d) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
    let (q, kv) = (cfg.num_heads * d, cfg.num_kv_heads * d);
    let mut v = vec![("model.embed_tokens.weight".to_string(), vec![cfg.vocab_size, h])];
    for l in 0..cfg.num_layers {
        let p = format!("model.layers.{l}");
        v.push((format!("{p}.input_layernorm.weight"), vec![h]));
        for (name, rows) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
            v.push((format!("{p}.self_attn.{name}.weight"), vec![rows, h]));
            if cfg.qkv_bias {
                v.push((format!("{p}.self_attn.{name}.bias"), vec![rows]));
            }
        }
        v.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
        if cfg.o_bias {
            v.push((format!("{p}.self_attn.o_proj.bias"), vec![h]));
        }
        if cfg.qk_norm {
            v.push((format!("{p}.self_attn.q_norm.weight"), vec![d]));
            v.push((format!("{p}.self_attn.k_norm.weight"), vec![d]));
        }
        v.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        for (name, shape) in [("gate_proj", [i, h]), ("up_proj", [i, h]), ("down_proj", [h, i])] {
            v.push((format!("{p}.mlp.{name}.weight"), shape.to_vec()));
            if cfg.mlp_bias {
                v.push((format!("{p}.mlp.{name}.bias"), vec![shape[0]]));
            }
        }
    }
    v.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        v.push(("lm_head.weight".to_string(), vec![cfg.vocab_size, h]));
    }
    v
}

/// Where a checkpoint came from, for reports and reproduction.
#[derive(Debug, Clone, serde::Serialize)]
pub enum CheckpointSource {
    Dir(PathBuf),
    /// A GGUF file, dequantized to f32; `quant` is its weights' dominant type (e.g. Q4_1).
    Gguf {
        path: PathBuf,
        quant: String,
    },
    Synth(String),
}

impl std::fmt::Display for CheckpointSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointSource::Dir(p) => write!(f, "{}", p.display()),
            CheckpointSource::Gguf { path, quant } => {
                write!(f, "gguf {} ({quant} dequantized)", path.display())
            }
            CheckpointSource::Synth(s) => write!(f, "synth {s}"),
        }
    }
}

/// A loaded checkpoint: config plus weights in their stored dtype (f32, bf16 or f16; a GGUF's
/// and a synth's are f32), shared by every model built from it.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub config: ModelConfig,
    pub tensors: BTreeMap<String, Tensor>,
    pub source: CheckpointSource,
    /// xxh3-64 of config.json and the weight files' bytes (of the GGUF file; of the synth spec).
    pub hash: String,
    /// The dtype the weights were stored in.
    pub stored_dtype: String,
}

impl Checkpoint {
    pub fn tensor(&self, name: &str) -> Result<&Tensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| Error::input(self.source.to_string(), format!("tensor `{name}` is missing")))
    }

    /// The lm_head matrix, `embed_tokens` when tied.
    pub fn lm_head(&self) -> Result<&Tensor> {
        if self.config.tie_word_embeddings {
            self.tensor("model.embed_tokens.weight")
        } else {
            self.tensor("lm_head.weight")
        }
    }

    /// Load `dir/config.json` and its weights.
    pub fn load_dir(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::input(
                dir.display().to_string(),
                "checkpoint directory not found (expected a folder with config.json and model.safetensors)",
            ));
        }
        let config_path = dir.join("config.json");
        let config_text = read_text(&config_path, Kind::Config)?;
        // The weight files' sizes bound what config.json may claim, before anything is sized
        // by it.
        let files = weight_files(dir)?;
        let bytes =
            files.iter().try_fold(0u64, |sum, f| Ok::<_, Error>(sum.saturating_add(data_bytes(f)?)))?;
        let budget = WeightBudget { bytes, what: weight_files_name(&files) };
        let config = ModelConfig::from_json_str_within(
            &config_text,
            &config_path.display().to_string(),
            Some(&budget),
        )?;
        // Held as stored (f64 narrowed to f32), so the files' tensor data is what they take.
        crate::budget::current().check(
            format!("{}: the weights in {}", dir.display(), budget.what),
            crate::budget::Bytes::new(bytes),
            "use a smaller checkpoint, or raise --max-memory (or the process's memory limits)",
        )?;
        let mut hasher = Xxh3::new();
        hasher.update(config_text.as_bytes());

        let mut raw: BTreeMap<String, Tensor> = BTreeMap::new();
        let mut dtypes = BTreeSet::new();
        for file in &files {
            let (tensors, file_dtypes) = read_safetensors(file, &mut hasher)?;
            raw.extend(tensors);
            dtypes.extend(file_dtypes);
        }
        let source = CheckpointSource::Dir(dir.to_path_buf());
        let tensors = check_tensors(&config, raw, &source.to_string())?;
        Ok(Checkpoint {
            config,
            tensors,
            source,
            hash: format!("xxh3:{:016x}", hasher.digest()),
            stored_dtype: dtypes.into_iter().collect::<Vec<_>>().join("+"),
        })
    }

    /// Write config.json and model.safetensors (f32, f16 or bf16).
    pub fn save(&self, dir: &Path, dtype: DType) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let config = serde_json::to_string_pretty(&self.config.to_hf_json()).expect("json");
        crate::files::write_file(dir.join("config.json"), config + "\n")?;
        let st_dtype = match dtype {
            DType::F32 => Dtype::F32,
            DType::F16 => Dtype::F16,
            DType::BF16 => Dtype::BF16,
            other => {
                return Err(Error::usage(format!("cannot save weights as {other:?}; use f32, f16 or bf16")))
            }
        };
        // Each tensor is converted while it is written (safetensors asks for one `View::data`
        // at a time), so the file costs one tensor's bytes beyond the weights, not a second copy.
        let views: Vec<(String, Stored)> = self
            .tensors
            .iter()
            .map(|(n, t)| (n.clone(), Stored { tensor: t, dtype, st_dtype, shape: t.dims().to_vec() }))
            .collect();
        let mut meta = std::collections::HashMap::new();
        meta.insert("format".to_string(), "pt".to_string());
        let path = dir.join("model.safetensors");
        // safetensors 0.8 writes through its own temporary file in the folder and renames it.
        safetensors::serialize_to_file(views, Some(meta), &path)
            .map_err(|e| Error::input(path.display().to_string(), format!("writing safetensors: {e}")))?;
        crate::files::default_mode(&path)?;
        crate::files::announce(&path);
        Ok(())
    }
}

/// A tensor as safetensors writes it: converted to `dtype` when its bytes are asked for.
struct Stored<'a> {
    tensor: &'a Tensor,
    dtype: DType,
    st_dtype: Dtype,
    shape: Vec<usize>,
}

impl safetensors::View for Stored<'_> {
    fn dtype(&self) -> Dtype {
        self.st_dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        // f32, f16 and bf16 of a CPU tensor always convert (other dtypes were refused above).
        let flat =
            self.tensor.flatten_all().and_then(|t| t.to_dtype(self.dtype)).expect("a CPU tensor converts");
        let bytes = match self.dtype {
            DType::F16 => {
                flat.to_vec1::<half::f16>().map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
            }
            DType::BF16 => {
                flat.to_vec1::<half::bf16>().map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
            }
            _ => flat.to_vec1::<f32>().map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        };
        std::borrow::Cow::Owned(bytes.expect("a flat CPU tensor reads back"))
    }

    fn data_len(&self) -> usize {
        self.tensor.elem_count() * self.st_dtype.bitsize() / 8
    }
}

fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Err(Error::input(
            dir.display().to_string(),
            "no model.safetensors or model.safetensors.index.json (hefprobe reads safetensors \
             checkpoints; convert .bin/.pt with transformers' save_pretrained)",
        ));
    }
    let text = read_text(&index, Kind::WeightIndex)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::input(index.display().to_string(), format!("not valid JSON: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| Error::input(index.display().to_string(), "missing object `weight_map`"))?;
    let mut files: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
    files.sort();
    files.dedup();
    files
        .into_iter()
        .map(|f| {
            if f.contains('/') || f.contains("..") {
                return Err(Error::input(
                    index.display().to_string(),
                    format!("weight_map names `{f}`, which is not a file name inside the checkpoint folder"),
                ));
            }
            let p = dir.join(&f);
            if p.is_file() {
                Ok(p)
            } else {
                Err(Error::input(
                    index.display().to_string(),
                    format!("shard `{f}` listed in weight_map does not exist"),
                ))
            }
        })
        .collect()
}

/// Every tensor of one safetensors file's bytes, in its stored dtype, with the dtypes it
/// stored. `what` names the file in errors. (The unit `fuzz/fuzz_targets/safetensors.rs` drives.)
pub fn tensors_from_bytes(bytes: &[u8], what: &str) -> Result<(BTreeMap<String, Tensor>, BTreeSet<String>)> {
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| Error::input(what, format!("corrupt or truncated safetensors file: {e}")))?;
    let mut out = BTreeMap::new();
    let mut dtypes = BTreeSet::new();
    for (name, view) in st.tensors() {
        dtypes.insert(format!("{:?}", view.dtype()).to_lowercase());
        let t = stored_tensor(view.dtype(), view.shape(), view.data(), &format!("{what} tensor `{name}`"))?;
        out.insert(name, t);
    }
    Ok((out, dtypes))
}

/// One safetensors file read tensor by tensor in file order, each into its own storage in its
/// stored dtype (f32, bf16, f16; f64 narrowed to f32), feeding `hasher` every byte of the file:
/// the weights cost their size on disk and one tensor more while it is read, never the file
/// twice. The header is checked as `SafeTensors::deserialize` checks it (offsets contiguous,
/// sizes matching shapes, data filling the file) before any tensor is allocated.
fn read_safetensors(file: &Path, hasher: &mut Xxh3) -> Result<(BTreeMap<String, Tensor>, BTreeSet<String>)> {
    use std::io::Read;
    let what = file.display().to_string();
    let corrupt = |msg: String| corrupt(file, msg);
    let Header { mut f, len, n, header } = read_header(file)?;
    let header_len = header.len() as u64;
    hasher.update(&n);
    hasher.update(&header);
    // Metadata's own deserializer validates the offsets and sizes (Metadata::new).
    let meta: safetensors::tensor::Metadata =
        serde_json::from_slice(&header).map_err(|e| corrupt(format!("header: {e}")))?;
    if 8 + header_len + meta.data_len() as u64 != len {
        return Err(corrupt(format!(
            "the header describes {} bytes of tensor data, the file holds {}",
            meta.data_len(),
            len - 8 - header_len
        )));
    }
    let mut out = BTreeMap::new();
    let mut dtypes = BTreeSet::new();
    let mut buf = Vec::new();
    for name in meta.offset_keys() {
        let info = meta.info(&name).expect("offset_keys names tensors of the metadata");
        let (start, end) = info.data_offsets;
        buf.resize(end - start, 0);
        f.read_exact(&mut buf).map_err(|e| Error::io(file, e))?;
        hasher.update(&buf);
        dtypes.insert(format!("{:?}", info.dtype).to_lowercase());
        let t = stored_tensor(info.dtype, &info.shape, &buf, &format!("{what} tensor `{name}`"))?;
        out.insert(name, t);
    }
    Ok((out, dtypes))
}

/// A tensor from its stored bytes, refusing non-finite values and dtypes the decoder does not
/// read. f32, bf16 and f16 stay as stored (the kernels widen them exactly); f64 is narrowed to
/// f32 here, as the reference computes in f32 either way.
fn stored_tensor(dtype: Dtype, shape: &[usize], data: &[u8], what: &str) -> Result<Tensor> {
    if let Some(found) = nonfinite(dtype, data) {
        return Err(nonfinite_error(what.to_string(), found));
    }
    let dev = Device::Cpu;
    let t = match dtype {
        Dtype::F32 => Tensor::from_raw_buffer(data, DType::F32, shape, &dev),
        Dtype::F16 => Tensor::from_raw_buffer(data, DType::F16, shape, &dev),
        Dtype::BF16 => Tensor::from_raw_buffer(data, DType::BF16, shape, &dev),
        Dtype::F64 => {
            Tensor::from_raw_buffer(data, DType::F64, shape, &dev).and_then(|t| t.to_dtype(DType::F32))
        }
        other => {
            return Err(Error::input(
                what,
                format!("dtype {other:?} is not supported (f32, f16, bf16, f64 are)"),
            ))
        }
    };
    t.map_err(|e| Error::input(what, e.to_string()))
}

fn corrupt(file: &Path, msg: String) -> Error {
    Error::input(file.display().to_string(), format!("corrupt or truncated safetensors file: {msg}"))
}

/// A safetensors file opened and read up to its data: its length, the 8 bytes of header
/// length, and the JSON header (bounded by safetensors' limit and by the file).
struct Header {
    f: std::io::BufReader<std::fs::File>,
    len: u64,
    n: [u8; 8],
    header: Vec<u8>,
}

fn read_header(file: &Path) -> Result<Header> {
    use std::io::Read;
    let mut f = std::io::BufReader::with_capacity(1 << 20, crate::files::open(file)?);
    let len = f.get_ref().metadata().map_err(|e| Error::io(file, e))?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|_| corrupt(file, format!("{len} bytes, shorter than the 8-byte header length")))?;
    let header_len = u64::from_le_bytes(n);
    // safetensors' MAX_HEADER_SIZE (tensor.rs): 100_000_000 bytes.
    if header_len > 100_000_000 || header_len > len - 8 {
        return Err(corrupt(file, format!("header length {header_len} does not fit the file's {len} bytes")));
    }
    let mut header = vec![0u8; header_len as usize];
    f.read_exact(&mut header).map_err(|e| Error::io(file, e))?;
    Ok(Header { f, len, n, header })
}

/// The tensor data bytes a safetensors file holds, from its header alone (8 bytes of header
/// length, the JSON header, then the data): enough to bound config.json before the weights
/// are read, and to name a truncated or corrupt file first.
fn data_bytes(file: &Path) -> Result<u64> {
    let corrupt = |msg: String| corrupt(file, msg);
    let Header { len, header, .. } = read_header(file)?;
    let n = header.len() as u64;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| corrupt(format!("header is not a JSON object: {e}")))?;
    let data = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    if 8 + n + data != len {
        return Err(corrupt(format!(
            "the header describes {data} bytes of tensor data, the file holds {}",
            len - 8 - n
        )));
    }
    Ok(data)
}

fn weight_files_name(files: &[PathBuf]) -> String {
    match files {
        [one] => {
            one.file_name().map_or_else(|| one.display().to_string(), |n| n.to_string_lossy().into_owned())
        }
        many => format!("the {} weight files", many.len()),
    }
}

/// The input error of a tensor holding `(count, first)` non-finite values (safetensors and
/// GGUF alike).
pub fn nonfinite_error(what: String, (count, first): (usize, usize)) -> Error {
    Error::input(
        what,
        format!(
            "holds {count} non-finite value{} (NaN or ±Inf; the first at flat index {first}): the checkpoint \
             is damaged or was saved after training diverged, and every tap downstream of it would be NaN",
            if count == 1 { "" } else { "s" }
        ),
    )
}

/// How many values of a float tensor are NaN or ±Inf, and the index of the first: one pass
/// over the stored bits (all exponent bits set), no conversion. `None` when all are finite.
pub fn nonfinite(dtype: Dtype, data: &[u8]) -> Option<(usize, usize)> {
    fn scan<const N: usize>(data: &[u8], is_bad: impl Fn([u8; N]) -> bool) -> Option<(usize, usize)> {
        let mut found: Option<(usize, usize)> = None;
        for (i, chunk) in data.chunks_exact(N).enumerate() {
            if is_bad(chunk.try_into().expect("chunks_exact")) {
                found = Some(found.map_or((1, i), |(n, first)| (n + 1, first)));
            }
        }
        found
    }
    match dtype {
        Dtype::F32 => scan::<4>(data, |b| u32::from_le_bytes(b) & 0x7f80_0000 == 0x7f80_0000),
        Dtype::F16 => scan::<2>(data, |b| u16::from_le_bytes(b) & 0x7c00 == 0x7c00),
        Dtype::BF16 => scan::<2>(data, |b| u16::from_le_bytes(b) & 0x7f80 == 0x7f80),
        Dtype::F64 => {
            scan::<8>(data, |b| u64::from_le_bytes(b) & 0x7ff0_0000_0000_0000 == 0x7ff0_0000_0000_0000)
        }
        _ => None,
    }
}

/// Check the loaded tensors against what the config needs: every tensor present with its
/// shape, nothing unexplained left over (an unused tensor means the config and the weights
/// disagree, e.g. biases the config does not enable).
pub fn check_tensors(
    cfg: &ModelConfig,
    mut raw: BTreeMap<String, Tensor>,
    source: &str,
) -> Result<BTreeMap<String, Tensor>> {
    let mut out = BTreeMap::new();
    // Older exports carry the rotary buffer; it is recomputed from the config.
    raw.retain(|k, _| !k.ends_with("rotary_emb.inv_freq"));
    // Every layer has at least 9 tensors, so more layers than tensors is impossible; saying so
    // here keeps the list of expected names (sized by the config) bounded by the file.
    if cfg.num_layers > raw.len() {
        return Err(Error::input(
            source,
            format!(
                "config.json's num_hidden_layers = {} needs at least {} tensors; the checkpoint holds {}",
                cfg.num_layers,
                cfg.num_layers.saturating_mul(9),
                raw.len()
            ),
        ));
    }
    for (name, shape) in expected_tensors(cfg) {
        let t = raw.remove(&name).ok_or_else(|| {
            let hint = if name == "lm_head.weight" {
                " (if the checkpoint ties lm_head to the embeddings, set \"tie_word_embeddings\": true in config.json)"
            } else {
                ""
            };
            Error::input(source, format!("tensor `{name}` is missing{hint}"))
        })?;
        if t.dims() != shape.as_slice() {
            return Err(Error::input(
                source,
                format!("tensor `{name}` has shape {:?}, the config implies {shape:?}", t.dims()),
            ));
        }
        out.insert(name, t);
    }
    if cfg.tie_word_embeddings {
        if let Some(lm) = raw.remove("lm_head.weight") {
            let embed = &out["model.embed_tokens.weight"];
            let same = lm.dims() == embed.dims()
                && lm.dtype() == embed.dtype()
                && (&lm - embed)?.abs()?.max_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()? == 0.0;
            if !same {
                return Err(Error::input(
                    source,
                    "tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight; \
                     set tie_word_embeddings to false to use lm_head.weight",
                ));
            }
        }
    }
    if let Some(extra) = raw.keys().next() {
        return Err(Error::input(
            source,
            format!(
                "tensor `{extra}` is not used by a {} model with this config ({} unused in all); \
                 the config and the weights disagree",
                cfg.arch.name(),
                raw.len()
            ),
        ));
    }
    Ok(out)
}
