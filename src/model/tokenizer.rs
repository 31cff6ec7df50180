//! Tokenization from a local tokenizer.json (offline), with BOS handling made explicit:
//! HailoRT's genai server encodes with add_special_tokens = false, so a host tokenizer
//! whose post-processor adds a BOS shifts every position by one (finding 6).

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    pub path: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    /// True when the tokenizer's post-processor put a special token in front.
    pub bos_added: bool,
}

impl Tokenizer {
    pub fn load(path: &Path) -> Result<Self> {
        if !path.is_file() {
            return Err(Error::input(
                path.display().to_string(),
                "tokenizer.json not found; give token ids with --tokens, or --tokenizer PATH",
            ));
        }
        let what = path.display().to_string();
        let text = crate::files::read_text(path, crate::files::Kind::Tokenizer)?;
        // tokenizers 0.23 `expect`s on a `decoder` it cannot read (decoders/mod.rs, "Helper").
        let inner = match crate::error::contained(|| text.parse::<tokenizers::Tokenizer>()) {
            Some(Ok(t)) => t,
            Some(Err(e)) => return Err(Error::input(what, format!("not a readable tokenizer.json: {e}"))),
            None => return Err(Error::input(
                what,
                "not a readable tokenizer.json: the tokenizers crate gave up on a field it cannot read (a \
                     malformed `decoder` does this); compare the file with the model's published one",
            )),
        };
        Ok(Tokenizer { inner, path: path.to_path_buf() })
    }

    /// The tokenizer a GGUF file describes in its `tokenizer.ggml.*` metadata.
    pub fn from_gguf(path: &Path) -> Result<Self> {
        Ok(Tokenizer { inner: crate::model::gguf::tokenizer::load(path)?, path: path.to_path_buf() })
    }

    /// The checkpoint's own tokenizer: a folder's tokenizer.json, a GGUF's metadata; None for a
    /// synthesized checkpoint or a folder that has none.
    pub fn of_checkpoint(ckpt: &crate::model::Checkpoint) -> Result<Option<Self>> {
        use crate::model::weights::CheckpointSource;
        match &ckpt.source {
            CheckpointSource::Dir(d) if d.join("tokenizer.json").is_file() => {
                Tokenizer::load(&d.join("tokenizer.json")).map(Some)
            }
            CheckpointSource::Gguf { path, .. } => Tokenizer::from_gguf(path).map(Some),
            _ => Ok(None),
        }
    }

    /// The tokenizer a text prompt of `ckpt` is encoded with when none is named: its own, or
    /// for a synthesized checkpoint whose vocabulary holds it, the byte-level synth one.
    pub fn for_checkpoint(ckpt: &crate::model::Checkpoint) -> Result<Self> {
        use crate::model::weights::CheckpointSource;
        match &ckpt.source {
            // A folder without one: named as missing, with the fix.
            CheckpointSource::Dir(d) => Tokenizer::load(&d.join("tokenizer.json")),
            CheckpointSource::Gguf { path, .. } => Tokenizer::from_gguf(path),
            _ if ckpt.config.vocab_size >= SYNTH_TOKENIZER_VOCAB => Ok(Tokenizer::synth()),
            _ => Err(Error::usage(format!(
                "text needs a tokenizer: this synthesized model's vocabulary ({}) is too small for the \
                 byte-level one; give token ids (--tokens 1,2,3, or tokens = [...] in a probe)",
                ckpt.config.vocab_size
            ))),
        }
    }

    /// tokenizer.json as text, as a HEF's tokenizer resource carries it.
    pub fn to_json(&self) -> Result<String> {
        self.inner.to_string(false).map_err(|e| {
            Error::input(self.path.display().to_string(), format!("cannot write the tokenizer as JSON: {e}"))
        })
    }

    /// The tokenizer `hefprobe synth` writes, in memory (for `--synth` models).
    pub fn synth() -> Self {
        let json = synth_tokenizer_json().to_string();
        Tokenizer {
            inner: json.parse().expect("the synthesized tokenizer.json is valid"),
            path: PathBuf::from("<synth tokenizer.json>"),
        }
    }

    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Encoded> {
        let what = || self.path.display().to_string();
        let enc = |special: bool| -> Result<Vec<u32>> {
            // tokenizers 0.23 indexes a TemplateProcessing's special tokens without checking that
            // the template's names are among them (processors/template.rs): contained.
            match crate::error::contained(|| self.inner.encode(text, special)) {
                Some(Ok(e)) => Ok(e.get_ids().to_vec()),
                Some(Err(e)) => Err(Error::input(what(), format!("encoding {text:?}: {e}"))),
                None => Err(Error::input(
                    what(),
                    format!(
                        "encoding {text:?}: the tokenizers crate gave up on this file (a `post_processor` \
                         template naming a token its `special_tokens` lacks does this); compare the file \
                         with the model's published one"
                    ),
                )),
            }
        };
        let ids = enc(add_special_tokens)?;
        let bos_added = add_special_tokens && {
            let plain = enc(false)?;
            ids.len() > plain.len() && ids.first() != plain.first()
        };
        Ok(Encoded { ids, bos_added })
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        self.decode_with(ids, false)
    }

    /// The text of `ids`, without the special tokens' text when `skip_special`.
    pub fn decode_with(&self, ids: &[u32], skip_special: bool) -> String {
        crate::error::contained(|| self.inner.decode(ids, skip_special))
            .and_then(|d| d.ok())
            .unwrap_or_default()
    }

    /// A special token (an added token marked special: BOS, EOS, `<|im_end|>`): its text is
    /// skipped where special tokens are, and servers end a generation on the stop ones.
    pub fn is_special(&self, id: u32) -> bool {
        self.decode_with(&[id], true).is_empty() && !self.decode_with(&[id], false).is_empty()
    }

    /// The ids of its special tokens (added tokens marked special), ascending.
    pub fn special_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .inner
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// The byte-level BPE tokenizer.json `hefprobe synth` writes: ids 0..2 are `<unk>`, `<s>`,
/// `</s>`; ids 3..259 are the 256 byte symbols (no merges, so one token per byte). Its
/// post-processor adds `<s>` with add_special_tokens, like Llama's, so the BOS question of
/// finding 6 can be asked of it.
pub fn synth_tokenizer_json() -> serde_json::Value {
    synth_tokenizer_json_within(SYNTH_TOKENIZER_VOCAB)
}

/// [`synth_tokenizer_json`] cut to the ids a model of `vocab` tokens has: every id it can give
/// is below `vocab`, so a HEF embedding it for a small-vocabulary checkpoint agrees with its own
/// embeddings table (`synth-hef`). Below [`SYNTH_TOKENIZER_VOCAB`] the highest bytes go first
/// (0xF5..=0xFF never occur in UTF-8, RFC 3629 §4, so down to 248 ids no text loses a byte),
/// and a byte without an id encodes as `<unk>` instead of vanishing.
pub fn synth_tokenizer_json_within(vocab: usize) -> serde_json::Value {
    use crate::model::gguf::tokenizer::{added, byte_level, byte_level_alphabet};
    use serde_json::{json, Map, Value};
    let mut vocab_map = Map::new();
    let specials: Vec<&str> = ["<unk>", "<s>", "</s>"].into_iter().take(vocab).collect();
    for (i, s) in specials.iter().enumerate() {
        vocab_map.insert(s.to_string(), Value::from(i));
    }
    let bytes = vocab.saturating_sub(specials.len());
    for (i, ch) in byte_level_alphabet().into_iter().take(bytes).enumerate() {
        vocab_map.insert(ch.to_string(), Value::from(specials.len() + i));
    }
    let cut = vocab < SYNTH_TOKENIZER_VOCAB;
    let added_tokens: Vec<Value> = specials.iter().enumerate().map(|(i, s)| added(i, s, true)).collect();
    // The post-processor names `<s>` (id 1); without that id there is no BOS to add.
    let post_processor = if specials.len() > 1 {
        json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}
        })
    } else {
        Value::Null
    };
    let unk = if cut && !specials.is_empty() { Value::from("<unk>") } else { Value::Null };
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": null,
        "pre_tokenizer": byte_level(false, true),
        "post_processor": post_processor,
        "decoder": byte_level(false, true),
        "model": {"type": "BPE", "dropout": null, "unk_token": unk, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab_map, "merges": []}
    })
}

/// Ids the synthesized tokenizer needs (3 specials + 256 bytes).
pub const SYNTH_TOKENIZER_VOCAB: usize = 259;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synth_tokenizer_loads_and_reports_bos() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokenizer.json");
        std::fs::write(&p, synth_tokenizer_json().to_string()).unwrap();
        let t = Tokenizer::load(&p).unwrap();
        let plain = t.encode("Once upon", false).unwrap();
        assert_eq!(plain.ids.len(), 9);
        assert!(!plain.bos_added);
        let with = t.encode("Once upon", true).unwrap();
        assert_eq!(with.ids[0], 1);
        assert!(with.bos_added);
        assert_eq!(t.decode(&plain.ids), "Once upon");
    }

    #[test]
    fn the_synth_tokenizer_cut_to_a_small_vocabulary_gives_no_id_beyond_it() {
        use crate::hef::audit::tokenizer_vocab_size;
        // The full one is the same document.
        assert_eq!(synth_tokenizer_json_within(SYNTH_TOKENIZER_VOCAB), synth_tokenizer_json());
        assert_eq!(synth_tokenizer_json_within(4096), synth_tokenizer_json());
        let dir = tempfile::tempdir().unwrap();
        for vocab in [256usize, 64, 8, 1] {
            let json = synth_tokenizer_json_within(vocab).to_string();
            assert_eq!(tokenizer_vocab_size(json.as_bytes()), Ok(vocab as u32), "vocab {vocab}");
            let p = dir.path().join(format!("tokenizer-{vocab}.json"));
            std::fs::write(&p, &json).unwrap();
            let t = Tokenizer::load(&p).unwrap();
            assert_eq!(t.vocab_size(), vocab);
            let e = t.encode("Once upon a time é", true).unwrap();
            assert!(e.ids.iter().all(|&id| (id as usize) < vocab), "vocab {vocab}: {:?}", e.ids);
            assert!(!e.ids.is_empty(), "vocab {vocab}: a byte without an id is <unk>, not nothing");
        }
        // 256 ids keep every byte UTF-8 uses: text still round-trips.
        let p = dir.path().join("tokenizer-256.json");
        let t = Tokenizer::load(&p).unwrap();
        let e = t.encode("Once upon a time é", false).unwrap();
        assert_eq!(t.decode(&e.ids), "Once upon a time é");
    }

    #[test]
    fn a_decoder_the_tokenizers_crate_panics_on_is_an_input_error() {
        // Found by fuzz/fuzz_targets/tokenizer_json.rs: tokenizers 0.23 `expect`s on this.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokenizer.json");
        // A JSON syntax error inside the `decoder` object (the fuzzer's input had `{"t],`).
        let json = synth_tokenizer_json().to_string().replacen(r#""decoder":{"#, r#""decoder":{"t],"#, 1);
        std::fs::write(&p, json).unwrap();
        let e = Tokenizer::load(&p).err().expect("refused");
        assert!(matches!(e, Error::Input { .. }), "{e}");
        assert!(e.to_string().contains("tokenizer.json") && e.to_string().contains("decoder"), "{e}");
        // A template naming a special token its table lacks loads, then panics in encode.
        let mut json = synth_tokenizer_json();
        let table = json["post_processor"]["special_tokens"].as_object_mut().unwrap();
        let s = table.remove("<s>").unwrap();
        table.insert("< s>".into(), s);
        std::fs::write(&p, json.to_string()).unwrap();
        let t = Tokenizer::load(&p).unwrap();
        let e = t.encode("Once", true).expect_err("refused");
        assert!(matches!(e, Error::Input { .. }) && e.to_string().contains("post_processor"), "{e}");
    }
}
