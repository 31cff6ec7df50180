#!/usr/bin/env bash
# Regenerate the seeds of the fuzz targets whose inputs hefprobe writes itself (fuzz/seeds/TARGET):
# real suite files, baselines, shard summaries and histories from a small nightly run over two
# catalog probes, and the tokenizer.json `synth` writes (plus hand-written tokenizers of the other
# model types). The GGUF seeds come from the loader's own writer:
#   HEFPROBE_FUZZ_SEEDS=fuzz/seeds/gguf_reader cargo test --lib write_fuzz_seeds -- --ignored
#
#   scripts/fuzz-seeds.sh [HEFPROBE]      (default: target/debug/hefprobe)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/debug/hefprobe}")
seeds=fuzz/seeds
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$seeds"/{tokenizer_json,suite_toml,suite_json,history_jsonl} "$work/probes"
cp probes/shared-softmax.toml probes/kv-cache-layout.toml "$work/probes/"

cat > "$work/suite.toml" <<'TOML'
version = 1
name = "seed"
probes = ["probes/*.toml"]
exclude = ["probes/missing-*.toml"]

[[target]]
name = "planted"
kind = "emulator"
faults = ["shared-softmax@layers=0"]

[[target]]
name = "clean"
kind = "emulator"

[gate]
runs = 2

[band]
cosine = 1e-4
TOML
cp "$work/suite.toml" "$seeds/suite_toml/suite.toml"
cat > "$seeds/suite_toml/minimal.toml" <<'TOML'
version = 1
probes = ["probes/shared-softmax.toml"]
TOML

# Run inside the scratch folder with relative paths, so no path of this machine lands in a seed.
s() { (cd "$work" && "$bin" suite suite.toml "$@" >/dev/null) || [ $? = 1 ]; }
s --baseline baseline.json --update-baseline
s --baseline baseline.json --history history.jsonl --report json=night.json
s --baseline baseline.json --history history.jsonl --shard 1/2 --report json=shard-1.json
s --report json=no-baseline.json
cp "$work/baseline.json" "$work/night.json" "$work/shard-1.json" "$work/no-baseline.json" "$seeds/suite_json/"
cp "$work/history.jsonl" "$seeds/history_jsonl/history.jsonl"
head -n 1 "$work/history.jsonl" > "$seeds/history_jsonl/one-line.jsonl"

"$bin" synth --arch llama --hidden 32 --layers 1 --heads 2 --kv-heads 1 --out "$work/ckpt" >/dev/null
cp "$work/ckpt/tokenizer.json" "$seeds/tokenizer_json/byte-level-bpe.json"
cat > "$seeds/tokenizer_json/wordlevel.json" <<'JSON'
{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Sequence","normalizers":[{"type":"NFKC"},{"type":"Lowercase"}]},"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"the":1,"quick":2,"brown":3,"fox":4,",":5},"unk_token":"[UNK]"}}
JSON
cat > "$seeds/tokenizer_json/wordpiece.json" <<'JSON'
{"version":"1.0","truncation":{"direction":"Right","max_length":8,"strategy":"LongestFirst","stride":0},"padding":null,"added_tokens":[],"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},"pre_tokenizer":{"type":"BertPreTokenizer"},"post_processor":null,"decoder":{"type":"WordPiece","prefix":"##","cleanup":true},"model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,"vocab":{"[UNK]":0,"the":1,"qu":2,"##ick":3,"fox":4}}}
JSON
cat > "$seeds/tokenizer_json/unigram.json" <<'JSON'
{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":{"type":"Replace","pattern":{"String":" "},"content":"▁"},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},"post_processor":null,"decoder":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},"model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["▁the",-1.5],["▁qu",-3.0],["ick",-2.0],["▁fox",-2.5],["▁",-4.0]],"byte_fallback":false}}
JSON
ls "$seeds"/{gguf_reader,tokenizer_json,suite_toml,suite_json,history_jsonl} | grep -c . | sed 's/^/seed files: /'
