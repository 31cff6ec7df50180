"""An `LLM` object (hailo_platform.genai's interface: generate, clear_context) judged as a served
model, token by token. The stand-in yields what HailoRT's iterator yields: one piece per token,
a stop token's text last, and after the tokens asked for the recovery token's text. Its tokens
are the reference's own greedy ones (a model of ASCII tokens), then the same with one changed."""

import json

import pytest

import hefprobe
from hefprobe import _native


def byte_chars():
    """GPT-2's byte-level alphabet: each byte's character in tokenizer.json (printable bytes as
    themselves, the rest from U+0100 on)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    rest = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(rest)}}


def ascii_tokenizer(vocab):
    """hefprobe's byte-level synth tokenizer cut to `vocab` ids (as `synth_tokenizer_json_within`):
    <unk>, <s>, </s>, then one id per byte from 0, so below 97 ids every token is ASCII text (a
    random model's high bytes are mostly not UTF-8, which a server holds back for good)."""
    specials = ["<unk>", "<s>", "</s>"]
    chars = byte_chars()
    table = {s: i for i, s in enumerate(specials)}
    table.update({chars[b]: 3 + b for b in range(vocab - 3)})
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(specials)]
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": table, "merges": []}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": level, "post_processor": None, "decoder": level, "model": model}


VOCAB = 97
BYTES = {3 + b: b for b in range(VOCAB - 3)}


class Completion:
    """HailoRT's LLMGeneratorCompletion: a context manager iterating pieces."""

    def __init__(self, pieces, status):
        self.pieces, self.generation_status = pieces, status

    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False

    def __iter__(self):
        return iter(self.pieces)


class FakeLLM:
    """Greedy continuations of the reference of `checkpoint`, optionally with token `flip` of
    each answer replaced by another byte."""

    def __init__(self, checkpoint, flip=None):
        self.checkpoint, self.flip, self.calls, self.cleared = checkpoint, flip, [], 0

    def clear_context(self):
        self.cleared += 1

    def generate(self, prompt, **kwargs):
        assert self.cleared == len(self.calls) + 1, "the context is cleared before every prompt"
        self.calls.append((prompt, kwargs))
        n = kwargs["max_generated_tokens"]
        cap = hefprobe.reference(self.checkpoint, text=prompt, taps="logits", decode=n - 1)
        ids = [int(cap[k][-1].argmax()) for k in cap.keys() if k.endswith("/logits")]
        if self.flip is not None and self.flip < len(ids):
            ids[self.flip] = 3 + ord("#") if ids[self.flip] != 3 + ord("#") else 3 + ord("%")
        pieces = []
        for i in ids:
            if i == 2:  # the HEF's stop token: its text is the last piece
                return Completion(pieces + ["</s>"], "LLMGeneratorCompletionStatus.LOGICAL_END_OF_GENERATION")
            pieces.append(chr(BYTES[i]) if i in BYTES else ["<unk>", "<s>"][i])
        # After the tokens asked for, HailoRT yields the recovery sequence (the EOS).
        return Completion(pieces + ["</s>"], "LLMGeneratorCompletionStatus.MAX_TOKENS_REACHED")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A 2-layer tinystories of 97 ids with the ASCII tokenizer: every token is text."""
    d = tmp_path_factory.mktemp("served") / "tiny"
    argv = ["hefprobe", "synth", "--preset", "tinystories", "--layers", "2", "--vocab", str(VOCAB), "-o", str(d)]
    assert _native.main(argv) == 0
    (d / "tokenizer.json").write_text(json.dumps(ascii_tokenizer(VOCAB)))
    return d


@pytest.fixture
def probe(tmp_path, checkpoint):
    p = tmp_path / "served.toml"
    p.write_text(
        f'version = 1\nname = "served"\nquestion = "q?"\ntaps = ["logits"]\n[checkpoint]\npath = "{checkpoint}"\n'
        '[inputs]\ntext = "ONCE UPON"\ndecode = 3\n[compare]\nlocal = false\nlens = false\n'
    )
    return p


def test_an_llm_object_is_judged_token_by_token(probe, checkpoint):
    llm = FakeLLM(checkpoint)
    report = hefprobe.run(probe, llm=llm)
    tokens = report.to_dict()["comparisons"][0]["tokens"]
    assert report.passed, report.to_terminal()
    assert tokens["agreement"] == tokens["compared"] == 4
    forced = tokens["forced"]
    assert forced["agreed"] == forced["positions"] and forced["positions"] + forced["skipped"] == 4
    prompt, kwargs = llm.calls[0]
    assert prompt == "ONCE UPON" and kwargs["max_generated_tokens"] == 4
    assert kwargs["do_sample"] is False and kwargs["frequency_penalty"] == 1.0 and kwargs["seed"] == 0
    # One-token continuations of the reference's own prefixes, each a fresh context.
    assert [c[1]["max_generated_tokens"] for c in llm.calls[1:]] == [1] * forced["positions"]
    assert all(c[0].startswith("ONCE UPON") for c in llm.calls[1:])


def test_the_first_token_an_llm_object_changes_is_the_first_divergence(probe, checkpoint):
    report = hefprobe.run(probe, llm=FakeLLM(checkpoint, flip=1), explain=False)
    d = report.to_dict()["comparisons"][0]["tokens"]["divergence"]
    assert d["position"] == 1 and d["reference_token"] != d["served_token"]
    assert "served by the Python object FakeLLM" in report.to_terminal()


def test_an_object_without_generate_is_refused(probe):
    with pytest.raises(hefprobe.InputError, match="has no `generate`"):
        hefprobe.run(probe, llm=object())
