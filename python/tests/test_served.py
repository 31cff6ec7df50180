"""An `LLM` object (hailo_platform.genai's interface: generate, clear_context) judged as a served
model, token by token. The stand-in yields what HailoRT's iterator yields: one piece per token
("" for a byte held back inside a UTF-8 character), and after the tokens asked for the recovery
token's text. Its tokens are the reference's own greedy ones, then the same with one changed."""

import pytest

import hefprobe
from hefprobe import _native


def byte_of_id():
    """The synth tokenizer's byte of each id: ids 3.. are GPT-2's byte-level alphabet in its
    order (printable bytes first, then the rest)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    order = printable + [b for b in range(256) if b not in printable]
    return {3 + i: b for i, b in enumerate(order)}


BYTES = byte_of_id()


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
            ids[self.flip] = 3 + list(BYTES.values()).index(ord("#")) if BYTES.get(ids[self.flip]) != ord("#") else 4
        pieces, held = [], b""
        for i in ids:
            held += bytes([BYTES[i]]) if i in BYTES else b""
            try:
                pieces.append(held.decode("utf-8"))
                held = b""
            except UnicodeDecodeError:
                pieces.append("")
        return Completion(pieces + ["</s>"], "LLMGeneratorCompletionStatus.MAX_TOKENS_REACHED")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A 2-layer tinystories whose vocabulary is the byte-level tokenizer's: every id is text."""
    d = tmp_path_factory.mktemp("served") / "tiny"
    argv = ["hefprobe", "synth", "--preset", "tinystories", "--layers", "2", "--vocab", "259", "-o", str(d)]
    assert _native.main(argv) == 0
    return d


@pytest.fixture
def probe(tmp_path, checkpoint):
    p = tmp_path / "served.toml"
    p.write_text(
        f'version = 1\nname = "served"\nquestion = "q?"\ntaps = ["logits"]\n[checkpoint]\npath = "{checkpoint}"\n'
        '[inputs]\ntext = "Once upon"\ndecode = 3\n[compare]\nlocal = false\nlens = false\n'
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
    assert prompt == "Once upon" and kwargs["max_generated_tokens"] == 4
    assert kwargs["do_sample"] is False and kwargs["frequency_penalty"] == 1.0 and kwargs["seed"] == 0
    # One-token continuations of the reference's own prefixes, each a fresh context.
    assert [c[1]["max_generated_tokens"] for c in llm.calls[1:]] == [1] * forced["positions"]
    assert all(c[0].startswith("Once upon") for c in llm.calls[1:])


def test_the_first_token_an_llm_object_changes_is_the_first_divergence(probe, checkpoint):
    report = hefprobe.run(probe, llm=FakeLLM(checkpoint, flip=1), explain=False)
    d = report.to_dict()["comparisons"][0]["tokens"]["divergence"]
    assert d["position"] == 1 and d["reference_token"] != d["served_token"]
    assert "served by the Python object FakeLLM" in report.to_terminal()


def test_an_object_without_generate_is_refused(probe):
    with pytest.raises(hefprobe.InputError, match="has no `generate`"):
        hefprobe.run(probe, llm=object())
