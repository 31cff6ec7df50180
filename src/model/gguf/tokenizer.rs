//! The tokenizer of a GGUF file, rebuilt from `tokenizer.ggml.*` the way transformers 5.23
//! does (`integrations/gguf/gguf_tokenizer_mapping.py`: `get_gguf_tokenizer`,
//! `byte_level_tokenizer`, `add_gguf_special_tokens`, `set_split_regex`; then
//! `TokenizersBackend.__init__` and `update_post_processor`), as a tokenizer.json value:
//!
//! - `tokenizer.ggml.model = "gpt2"` (byte-level BPE) only; sentencepiece (`llama`) and the
//!   others are refused with the way out (`--tokenizer tokenizer.json`).
//! - vocab: each token at its index; a token with a character outside GPT-2's byte alphabet
//!   is re-spelled as its UTF-8 bytes in that alphabet. merges: each `a b` entry as a pair.
//!   BPE with no unk token, no prefixes or suffixes, no fuse_unk, no byte fallback (GPT2Tokenizer).
//! - pre-tokenizer: `Split(regex, isolated)` + `ByteLevel(add_prefix_space=false,
//!   use_regex=false)` when `tokenizer.ggml.pre` names a known split, else GPT2Tokenizer's
//!   `ByteLevel(add_prefix_space=false)`; decoder `ByteLevel()`.
//! - added tokens: every CONTROL token (type 3) written in the byte alphabet, as special; every
//!   USER_DEFINED token (type 4) in the vocab, as not special; then the named special tokens
//!   (GPT2Tokenizer's default `<|endoftext|>`, and the file's bos/eos/unk/pad tokens) as special
//!   when not already added. All with `normalized: false`.
//! - post-processor: `TemplateProcessing` with the bos token first when
//!   `tokenizer.ggml.add_bos_token` (default false for gpt2 files) and eos last when
//!   `add_eos_token`.
//!
//! One deliberate difference: transformers appends GPT2Tokenizer's default `<|endoftext|>` as a
//! new id past the vocabulary when the file has no such token; hefprobe leaves it out (no
//! embedding row exists for it).

use super::file::GgufFile;
use crate::error::{Error, Result};
use serde_json::{json, Map, Value};
use std::path::Path;

/// `tokenizer.ggml.pre` → the split regex transformers installs (`GGUF_PRE_TOKENIZER_SPLITS`).
/// These are the pre-tokenizer regexes of the model families' own tokenizer.json files.
const SPLITS: &[(&[&str], &str)] = &[
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
            "dbrx",
            "smaug-bpe",
        ],
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    (
        &["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"],
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    (
        &["tekken"],
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    (
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
];

/// llama.cpp token types (gguf-py `TokenType`).
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// A `ByteLevel` pre-tokenizer or decoder (also the synthesized tokenizer's).
pub(crate) fn byte_level(add_prefix_space: bool, use_regex: bool) -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": true, "use_regex": use_regex})
}

/// An added token (also the synthesized tokenizer's specials).
pub(crate) fn added(id: usize, content: &str, special: bool) -> Value {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
           "normalized": false, "special": special})
}

/// The tokenizer.json transformers would build for this file.
pub fn tokenizer_json(file: &GgufFile) -> Result<Value> {
    let (tokens, types, merges) = read_lists(file)?;
    let alphabet = byte_level_alphabet();
    let mut vocab = Map::new();
    for (i, t) in tokens.iter().enumerate() {
        let spelled = if in_alphabet(&alphabet, t) {
            t.to_string()
        } else {
            t.bytes().map(|b| alphabet[b as usize]).collect()
        };
        vocab.insert(spelled, Value::from(i));
    }
    let merges: Vec<Value> = merges.iter().map(|m| Value::from(m.split(' ').collect::<Vec<_>>())).collect();
    let added_tokens = added_tokens(file, (&tokens, &types), &vocab, &alphabet)?;
    let bos = special_id(file, &tokens, "tokenizer.ggml.bos_token_id")?;
    let eos = special_id(file, &tokens, "tokenizer.ggml.eos_token_id")?;
    let pre = file.string("tokenizer.ggml.pre")?.unwrap_or("default");
    let pre_tokenizer = match SPLITS.iter().find(|(names, _)| names.contains(&pre)) {
        Some((_, regex)) => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false, false)
        ]}),
        None => byte_level(false, true),
    };
    let post_processor = post_processor(
        file.boolean("tokenizer.ggml.add_bos_token")?.unwrap_or(false).then_some(bos).flatten(),
        file.boolean("tokenizer.ggml.add_eos_token")?.unwrap_or(false).then_some(eos).flatten(),
    );
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": byte_level(true, true),
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges}
    }))
}

/// The tokens, their types and the merges of a byte-level BPE file; any other model refused.
fn read_lists(file: &GgufFile) -> Result<(Vec<&str>, Vec<i64>, Vec<&str>)> {
    let model = file.string("tokenizer.ggml.model")?.unwrap_or("(none)");
    if model != "gpt2" {
        return Err(Error::Unsupported(format!(
            "{}: tokenizer.ggml.model `{model}`: hefprobe rebuilds only byte-level BPE (`gpt2`) tokenizers \
             from GGUF metadata; give a tokenizer.json with --tokenizer (or `tokenizer` in a probe), or token ids",
            file.path.display()
        )));
    }
    let tokens = file.strings("tokenizer.ggml.tokens")?.ok_or_else(|| {
        Error::input(file.what("tokenizer.ggml.tokens"), "missing; the file has no vocabulary")
    })?;
    let types = file.ints("tokenizer.ggml.token_type")?.unwrap_or_default();
    let merges = file.strings("tokenizer.ggml.merges")?.ok_or_else(|| {
        Error::input(file.what("tokenizer.ggml.merges"), "missing; a byte-level BPE file lists its merges")
    })?;
    Ok((tokens, types, merges))
}

/// Whether `t` is spelled in the byte-level alphabet already.
fn in_alphabet(alphabet: &[char], t: &str) -> bool {
    t.chars().all(|c| alphabet.contains(&c))
}

/// The id and token of the special token `key` names, if the file names one.
fn special_id(file: &GgufFile, tokens: &[&str], key: &str) -> Result<Option<(usize, String)>> {
    let Some(id) = file.uint(key)? else { return Ok(None) };
    let t = tokens.get(id as usize).ok_or_else(|| {
        Error::input(file.what(key), format!("{id} is past the vocabulary ({} tokens)", tokens.len()))
    })?;
    Ok(Some((id as usize, t.to_string())))
}

/// The added tokens, in transformers' order: CONTROL tokens, USER_DEFINED ones, then the
/// named special tokens not added yet.
fn added_tokens(
    file: &GgufFile,
    (tokens, types): (&[&str], &[i64]),
    vocab: &Map<String, Value>,
    alphabet: &[char],
) -> Result<Vec<Value>> {
    let mut added_tokens: Vec<Value> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (i, (t, ty)) in tokens.iter().zip(types).enumerate() {
        if *ty == CONTROL && in_alphabet(alphabet, t) {
            added_tokens.push(added(i, t, true));
            seen.push(t.to_string());
        }
    }
    for (i, (t, ty)) in tokens.iter().zip(types).enumerate() {
        if *ty == USER_DEFINED && vocab.contains_key(*t) && !seen.iter().any(|s| s == t) {
            added_tokens.push(added(vocab[*t].as_u64().unwrap_or(i as u64) as usize, t, false));
            seen.push(t.to_string());
        }
    }
    let mut named: Vec<String> = vec!["<|endoftext|>".into()];
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
    ] {
        if let Some((_, t)) = special_id(file, tokens, key)? {
            named.push(t);
        }
    }
    for t in named {
        if !seen.contains(&t) {
            if let Some(id) = vocab.get(&t).and_then(Value::as_u64) {
                added_tokens.push(added(id as usize, &t, true));
                seen.push(t);
            }
        }
    }
    Ok(added_tokens)
}

/// `TokenizersBackend.update_post_processor`: `[bos] $A [eos]` with the pair form likewise.
fn post_processor(bos: Option<(usize, String)>, eos: Option<(usize, String)>) -> Value {
    let special =
        |t: &(usize, String), type_id: u32| json!({"SpecialToken": {"id": t.1, "type_id": type_id}});
    let seq = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
    let part = |seq_id: &str, type_id: u32| -> Vec<Value> {
        let mut v: Vec<Value> = bos.iter().map(|b| special(b, type_id)).collect();
        v.push(seq(seq_id, type_id));
        v.extend(eos.iter().map(|e| special(e, type_id)));
        v
    };
    let single = part("A", 0);
    let pair = [part("A", 0), part("B", 1)].concat();
    let mut tokens = Map::new();
    for t in bos.iter().chain(eos.iter()) {
        tokens.insert(t.1.clone(), json!({"id": t.1, "ids": [t.0], "tokens": [t.1]}));
    }
    json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": tokens})
}

/// The file's tokenizer, ready to encode.
pub fn load(path: &Path) -> Result<tokenizers::Tokenizer> {
    let file = GgufFile::open(path)?;
    let json = tokenizer_json(&file)?;
    json.to_string().parse().map_err(|e| {
        Error::input(
            path.display().to_string(),
            format!("the tokenizer rebuilt from tokenizer.ggml.* does not load: {e}"),
        )
    })
}

/// GPT-2's byte-to-unicode table, which ByteLevel pre-tokenizers use (index = byte).
pub(crate) fn byte_level_alphabet() -> Vec<char> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut pairs: Vec<(u32, u32)> = bs.into_iter().zip(cs).collect();
    pairs.sort();
    pairs.into_iter().map(|(_, c)| char::from_u32(c).expect("valid char")).collect()
}
