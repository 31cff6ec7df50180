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
    cap = _native.reference(
        None if checkpoint is None else os.fspath(checkpoint),
        tokens=None if tokens is None else [int(t) for t in tokens],
        text=text,
        taps=_strings(taps),
        decode=decode,
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
    ``"emulator=shared-softmax@layers=0"``); ``fault``: fault specs for one emulator.
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
    Other options: pairs, quant, revision, spill_dir."""
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


def _to_pandas(self):
    """The rows as a pandas DataFrame (pandas must be installed)."""
    import pandas as pd

    return pd.DataFrame(self.rows)


def _repr_html_(self) -> str:
    import html

    return "<pre>" + html.escape(self.to_terminal()) + "</pre>"


Report.to_pandas = _to_pandas
Report._repr_html_ = _repr_html_
