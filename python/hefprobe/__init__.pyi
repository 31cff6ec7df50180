import os
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Union

import numpy as np
import numpy.typing as npt

class HefprobeError(Exception): ...
class InputError(HefprobeError):
    """Exit code 2's kind: a file, key, tensor, field or argument is wrong (the message names it)."""
class DeviceError(HefprobeError):
    """Exit code 3's kind: the device, a tensor computation or the disk failed."""

class Capture(Mapping[str, npt.NDArray[np.float32]]):
    """``"PHASE/TAP"`` → read-only float32 arrays shared with Rust (no copy)."""
    def __getitem__(self, key: str) -> npt.NDArray[np.float32]: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[str]: ...
    def __contains__(self, key: object) -> bool: ...
    def keys(self) -> List[str]: ...  # type: ignore[override]
    @property
    def notes(self) -> List[str]: ...
    def save(self, path: Union[str, os.PathLike[str]]) -> None: ...
    @staticmethod
    def load(path: Union[str, os.PathLike[str]]) -> Capture: ...

class Report:
    @property
    def passed(self) -> bool: ...
    @property
    def first_drift(self) -> Optional[Dict[str, Any]]: ...
    @property
    def best_explanation(self) -> Optional[str]: ...
    @property
    def rows(self) -> List[Dict[str, Any]]: ...
    def to_dict(self) -> Dict[str, Any]: ...
    def to_json(self) -> str: ...
    def to_markdown(self) -> str: ...
    def to_terminal(self) -> str: ...
    def to_svg(self, prefix: Union[str, os.PathLike[str]]) -> List[str]: ...
    def to_pandas(self) -> Any: ...
    def _repr_html_(self) -> str: ...

class Audit:
    @property
    def passed(self) -> bool: ...
    def to_dict(self) -> Any: ...
    def to_json(self) -> str: ...
    def to_markdown(self) -> str: ...

PathLike = Union[str, os.PathLike[str]]
Side = Union[Capture, PathLike, Mapping[str, npt.ArrayLike]]
Thresholds = Union[None, str, Iterable[str], Mapping[str, float]]

def reference(
    checkpoint: Optional[PathLike] = None,
    *,
    tokens: Optional[Iterable[int]] = None,
    text: Optional[str] = None,
    taps: Union[str, Iterable[str]] = "*",
    decode: int = 0,
    revision: Optional[str] = None,
    synth: Optional[str] = None,
    seed: int = 0,
    tokenizer: Optional[PathLike] = None,
    decode_tokens: Optional[List[int]] = None,
    chunk: Optional[int] = None,
    start_position: int = 0,
    add_special_tokens: bool = False,
) -> Capture: ...
def compare(reference: Side, candidate: Side, *, thresholds: Thresholds = None, map: Optional[PathLike] = None) -> Report: ...
def run(
    probe: PathLike,
    *,
    backend: Union[None, str, Iterable[str]] = None,
    fault: Union[None, str, Iterable[str]] = None,
    checkpoint: Optional[PathLike] = None,
    thresholds: Thresholds = None,
    explain: bool = True,
    revision: Optional[str] = None,
    spill_dir: Optional[PathLike] = None,
    save_captures: Optional[PathLike] = None,
    llm: Any = None,
) -> Report: ...
def explain(
    probe: PathLike,
    *,
    observed: Optional[PathLike] = None,
    backend: Optional[str] = None,
    faults: Union[None, str, Iterable[str]] = None,
    checkpoint: Optional[PathLike] = None,
    thresholds: Thresholds = None,
    map: Optional[PathLike] = None,
    hef: Optional[PathLike] = None,
    pairs: bool = False,
    quant: Optional[str] = None,
    revision: Optional[str] = None,
    spill_dir: Optional[PathLike] = None,
    exhaustive: bool = False,
) -> Report: ...
def audit(hef: PathLike, *, against: Optional[PathLike] = None) -> Audit: ...
def synth_hef(
    out: PathLike,
    *,
    checkpoint: Optional[PathLike] = None,
    fault: Union[None, str, Iterable[str]] = None,
    quant: str = "a16",
    revision: Optional[str] = None,
    synth: Optional[str] = None,
    seed: int = 0,
    prefill_tokens: int = 96,
    kv_cache_size: int = 2048,
    tbt: bool = True,
    lm_head_shards: int = 1,
    mistakes: Union[None, str, Iterable[str]] = None,
    calib_tokens: Optional[List[List[int]]] = None,
    calib_text: Optional[PathLike] = None,
    expose: Union[None, str, Iterable[str]] = None,
    expose_quant: str = "per-feature",
    layers: Optional[tuple[int, int]] = None,
) -> Dict[str, Any]: ...
def set_progress(mode: Union[bool, str, None] = None) -> None: ...
