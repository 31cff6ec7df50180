"""hefprobe from Python: the float32 reference's taps as numpy arrays, comparisons of any
arrays against them (a Dataflow Compiler emulator's, a device's), probe runs, fault
explanations and HEF audits, all computed by hefprobe's Rust library.

>>> import hefprobe
>>> report = hefprobe.run("probes/shared-softmax.toml")
>>> report.first_drift["tap"], report.best_explanation
('layers.0.attn.probs', 'shared-softmax@layers=0')

Drift is a result (``report.passed``), never an exception; bad input raises ``InputError``
(the command line's exit code 2), a device or runtime failure ``DeviceError`` (exit code 3).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any, Dict, Iterable, Optional, Union

import numpy as np

from . import _native
from ._native import Audit, Capture, DeviceError, HefprobeError, InputError, Report

__all__ = [
    "Audit",
    "Capture",
    "DeviceError",
    "HefprobeError",
    "InputError",
    "Report",
    "audit",
    "compare",
    "explain",
    "reference",
    "run",
    "set_progress",
    "synth_hef",
]

Mapping.register(Capture)

Side = Union[Capture, "os.PathLike[str]", str, Dict[str, np.ndarray]]


def _strings(v: Union[None, str, Iterable[str]]) -> Optional[list]:
    if v is None:
        return None
    return [v] if isinstance(v, str) else list(v)


def _bounds(thresholds: Union[None, str, Iterable[str], Mapping]) -> Optional[list]:
    """``{"logits:kl_mean": 0.01}`` or ``["logits:kl_mean=0.01"]``: the command line's --threshold."""
    if isinstance(thresholds, Mapping):
        return [f"{k}={v}" for k, v in thresholds.items()]
    return _strings(thresholds)


def _side(x: Any, what: str) -> Any:
    """A dict's arrays as C-contiguous float32 (a copy only where they are not; said when the
    dtype changes, since that changes the numbers)."""
    if not isinstance(x, Mapping) or isinstance(x, Capture):
        return x
    out = {}
    for k, v in x.items():
        try:
            a = np.asarray(v)
            if a.dtype != np.float32:
                warnings.warn(f"hefprobe.compare: {what}[{k!r}] is {a.dtype}; compared as float32", stacklevel=3)
            out[k] = np.ascontiguousarray(a, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise InputError(f"{what}[{k!r}]: not an array of numbers ({e})") from None
    return out


def _whole(name: str, v: Any, bits: int) -> int:
    """A count or token id for the Rust side (an unsigned integer of `bits`), or InputError naming it."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < 2**bits:
        raise InputError(f"{name}: {v!r} is not a whole number from 0 to 2**{bits} - 1")
    return int(v)


def _ids(name: str, v: Optional[Iterable[int]]) -> Optional[list]:
    return None if v is None else [_whole(f"{name}[{i}]", t, 32) for i, t in enumerate(v)]


def reference(checkpoint=None, *, tokens=None, text=None, taps="*", decode=0, **options) -> Capture:
    """Run the float32 reference: a :class:`Capture` of ``"PHASE/TAP"`` → float32 arrays
    (shared with numpy, not copied).

    ``checkpoint`` is a folder, a ``.gguf`` file or a hub id in the local cache; or give
    ``synth="smollm2-135m"`` (a preset, see ``hefprobe synth --help``) instead.
    Other options: revision, seed, tokenizer, decode_tokens, chunk, start_position,
    add_special_tokens (as ``hefprobe reference``).

    >>> cap = hefprobe.reference(synth="tinystories", tokens=[1, 2, 3], taps="layers.0.*", decode=2)
    >>> cap["prefill/layers.0.attn.probs"].shape
    (6, 3, 3)
    """
    for k in ("chunk", "start_position", "seed"):
        if options.get(k) is not None:
            options[k] = _whole(k, options[k], 64)
    if "decode_tokens" in options:
        options["decode_tokens"] = _ids("decode_tokens", options["decode_tokens"])
    cap = _native.reference(
        None if checkpoint is None else os.fspath(checkpoint),
        tokens=_ids("tokens", tokens),
        text=text,
        taps=_strings(taps),
        decode=_whole("decode", decode, 64),
        **options,
    )
    for note in cap.notes:
        warnings.warn(f"hefprobe.reference: {note}", stacklevel=2)
    return cap


def compare(reference: Side, candidate: Side, *, thresholds=None, map=None) -> Report:
    """Compare two captures, each a :class:`Capture`, an ``.npz`` path or a
    ``dict[str, np.ndarray]`` keyed ``"PHASE/TAP"`` (or by any names, with ``map``: a name-map
    TOML, as ``hefprobe compare --map``). ``thresholds``: ``{"GLOB:METRIC": VALUE}`` or
    ``["GLOB:METRIC=VALUE"]``, on top of the defaults.

    >>> ref = hefprobe.reference(synth="tinystories", tokens=[1, 2, 3])
    >>> dev = {k: ref[k] for k in ref}
    >>> dev["prefill/layers.2.mlp.out"] = np.flip(ref["prefill/layers.2.mlp.out"], -1)
    >>> hefprobe.compare(ref, dev).first_drift["tap"]
    'layers.2.mlp.out'
    """
    return _native.compare(
        _side(reference, "reference"),
        _side(candidate, "candidate"),
        thresholds=_bounds(thresholds),
        map=None if map is None else os.fspath(map),
    )


def run(probe, *, backend=None, fault=None, checkpoint=None, thresholds=None, explain=True, **options) -> Report:
    """Run a probe (``hefprobe run PROBE.toml``): reference vs its backends, compared, located
    and explained. ``backend``: one spec or a list (``"hef=model.hef"``,
    ``"emulator=shared-softmax@layers=0"``); ``fault``: fault specs for one emulator;
    ``llm``: a served model, genai's ``LLM`` object (or anything with its ``generate`` and
    ``clear_context``), judged token by token (docs/SERVING.md).
    Other options: revision, spill_dir, save_captures."""
    return _native.run(
        os.fspath(probe),
        backend=_strings(backend),
        fault=_strings(fault),
        checkpoint=None if checkpoint is None else os.fspath(checkpoint),
        thresholds=_bounds(thresholds),
        explain=explain,
        **options,
    )


def explain(probe, *, observed=None, backend=None, faults=None, checkpoint=None, thresholds=None, **options) -> Report:
    """Rank the fault catalog against an observation (``hefprobe explain``): ``observed`` an
    ``.npz`` (with ``map=`` and ``hef=`` as the command line's), or ``backend`` a spec.
    Other options: pairs, quant, revision, spill_dir, exhaustive."""
    for k in ("map", "hef", "spill_dir"):
        if options.get(k) is not None:
            options[k] = os.fspath(options[k])
    return _native.explain(
        os.fspath(probe),
        observed=None if observed is None else os.fspath(observed),
        backend=backend,
        faults=_strings(faults),
        checkpoint=None if checkpoint is None else os.fspath(checkpoint),
        thresholds=_bounds(thresholds),
        **options,
    )


def audit(hef, *, against=None) -> Audit:
    """Check a HEF's structure (``hefprobe audit``), or diff it against a reference HEF."""
    return _native.audit(os.fspath(hef), against=None if against is None else os.fspath(against))


def synth_hef(out, *, checkpoint=None, fault=None, quant="a16", **options) -> Dict[str, Any]:
    """Write a simulated Hailo-10H LLM HEF for a checkpoint (``hefprobe synth-hef``) and return
    what was written: ``path``, ``groups``, ``checkpoint``, ``hash``, ``prefill_tokens``,
    ``kv_cache_size``, ``quant``, ``faults``, ``mistakes``, ``exposed``, ``expose_quant``.

    ``fault``: fault specs the device computes; ``quant``: ``"a16"`` (the default),
    ``"w8a16"``, ..., or ``"none"``. Other options: revision, synth, seed, prefill_tokens,
    kv_cache_size, tbt, lm_head_shards, mistakes, calib_tokens (a list of id lists),
    calib_text, expose (tap globs), expose_quant, layers (``(A, B)``).

    >>> hefprobe.synth_hef("faulty.hef", synth="tinystories", fault="shared-softmax@layers=1")["faults"]
    ['shared-softmax@layers=1']
    """
    for k in ("prefill_tokens", "kv_cache_size", "lm_head_shards", "seed"):
        if options.get(k) is not None:
            options[k] = _whole(k, options[k], 64)
    if options.get("calib_tokens") is not None:
        options["calib_tokens"] = [_ids(f"calib_tokens[{i}]", p) for i, p in enumerate(options["calib_tokens"])]
    if options.get("layers") is not None:
        a, b = options["layers"]
        options["layers"] = (_whole("layers[0]", a, 64), _whole("layers[1]", b, 64))
    if options.get("calib_text") is not None:
        options["calib_text"] = os.fspath(options["calib_text"])
    for k in ("mistakes", "expose"):
        if k in options:
            options[k] = _strings(options[k])
    return _native.synth_hef(
        os.fspath(out),
        checkpoint=None if checkpoint is None else os.fspath(checkpoint),
        fault=_strings(fault),
        quant=quant,
        **options,
    )


def set_progress(mode: Union[bool, str, None] = None) -> None:
    """Where progress bars of long work (decode, backends, explain's emulations) are drawn:
    ``None``/``"auto"`` on stderr when it is a terminal (the default: a bar in a terminal,
    quiet in a notebook), ``True``/``"on"`` on ``sys.stderr`` always (a notebook shows it),
    ``False``/``"off"`` nowhere."""
    names = {None: "auto", True: "on", False: "off"}
    _native.set_progress(names.get(mode, mode) if mode is None or isinstance(mode, bool) else mode)


def _to_pandas(self):
    """The rows as a pandas DataFrame (pandas must be installed)."""
    import pandas as pd

    return pd.DataFrame(self.rows)


def _repr_html_(self) -> str:
    import html

    return "<pre>" + html.escape(self.to_terminal()) + "</pre>"


Report.to_pandas = _to_pandas
Report._repr_html_ = _repr_html_
