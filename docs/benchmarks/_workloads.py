"""Benchmark workloads: deterministic variable layouts and their source files on disk.

Builds W1 (transformer-like, ~1.2 GB float32) and W2 (50,000 small variables)
once per run as one flat `.bin` of float32 values plus a `.json` layout, so that
no timed region ever generates data. W3 (read one variable) and W4 (restore into
a store with expensive initializers) reuse W1's layout and checkpoints.
Knows nothing about checkpoint formats; `_methods.py` does.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "DTYPE",
    "READ_ONE_NAME",
    "SLEEP_S",
    "VariableSpec",
    "Workload",
    "build_workloads",
    "load_workload",
    "w1_arrays",
    "w1_layout",
    "w2_layout",
]

DTYPE = np.dtype("float32")
# W3 reads this one W1 variable (4 MiB at full scale).
READ_ONE_NAME = "layer_12/attn/q/kernel"
# W4: each initializer sleeps this long (seconds) when called.
SLEEP_S = 0.010

_W1_LAYERS = 24
_W1_HIDDEN = 1024        # 24 layers x 12 H^2 float32 = 1.21 GB at H=1024
_W2_COUNT = 50_000
_W2_SIZE = 64            # float32 values per W2 variable


@dataclasses.dataclass(frozen=True)
class VariableSpec:
    """One variable of a workload.

    Attributes:
      name: full name, e.g. "layer_03/attn/q/kernel".
      shape: tuple of ints.
      offset: byte offset of its values in the workload's source `.bin`.
    """

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the value (float32)."""
        return self.size * DTYPE.itemsize


@dataclasses.dataclass(frozen=True)
class Workload:
    """A generated workload: its variables and the flat source file holding their values.

    Attributes:
      name: "W1" or "W2".
      variables: in storage order; offsets are contiguous from 0.
      source: path of the flat float32 `.bin` file.
      description: one line for the report.
    """

    name: str
    variables: tuple[VariableSpec, ...]
    source: Path
    description: str

    @property
    def nbytes(self) -> int:
        """Total bytes of all values."""
        return sum(v.nbytes for v in self.variables)

    def by_name(self, name: str) -> VariableSpec:
        """The variable called `name`; KeyError if absent."""
        for v in self.variables:
            if v.name == name:
                return v
        raise KeyError(f"workload {self.name} has no variable '{name}'")

    def read_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Reads every variable from the source file as its own array (peak memory: model + 0)."""
        out: dict[str, npt.NDArray[Any]] = {}
        with open(self.source, "rb") as f:
            for v in self.variables:
                f.seek(v.offset)
                out[v.name] = np.fromfile(f, dtype=DTYPE, count=v.size).reshape(v.shape)
        return out

    def read_flat(self) -> npt.NDArray[Any]:
        """Reads all values as one flat float32 array."""
        return np.fromfile(self.source, dtype=DTYPE)

    def read_one(self, name: str) -> npt.NDArray[Any]:
        """Reads one variable's expected value from the source file."""
        v = self.by_name(name)
        with open(self.source, "rb") as f:
            f.seek(v.offset)
            return np.fromfile(f, dtype=DTYPE, count=v.size).reshape(v.shape)

    def to_json(self) -> dict[str, Any]:
        """JSON form, as stored beside the source file."""
        return {
            "name": self.name,
            "description": self.description,
            "source": str(self.source),
            "variables": [[v.name, list(v.shape), v.offset] for v in self.variables],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workload:
        """Inverse of `to_json`."""
        return cls(
            name=data["name"],
            description=data["description"],
            source=Path(data["source"]),
            variables=tuple(VariableSpec(n, tuple(s), o) for n, s, o in data["variables"]),
        )


def _with_offsets(layout: list[tuple[str, tuple[int, ...]]]) -> tuple[VariableSpec, ...]:
    specs, offset = [], 0
    for name, shape in layout:
        spec = VariableSpec(name, shape, offset)
        specs.append(spec)
        offset += spec.nbytes
    return tuple(specs)


def w1_hidden(scale: float) -> int:
    """Hidden size for W1 at `scale` (bytes scale as hidden^2); at least 8."""
    return max(8, int(round(_W1_HIDDEN * math.sqrt(scale))))


def w1_layout(scale: float = 1.0) -> list[tuple[str, tuple[int, ...]]]:
    """W1: 24 transformer layers of attention and MLP weights, biases and layer norms.

    16 variables a layer (384 in all): attn q/k/v/o kernels (H, H) and biases (H,),
    mlp up (H, 4H) / down (4H, H) kernels and biases, ln_1 / ln_2 gamma and beta (H,).
    H = 1024 at scale 1 (1.21 GB); `scale` shrinks the bytes, not the variable count.
    """
    h = w1_hidden(scale)
    layout: list[tuple[str, tuple[int, ...]]] = []
    for i in range(_W1_LAYERS):
        p = f"layer_{i:02d}"
        for proj in ("q", "k", "v", "o"):
            layout.append((f"{p}/attn/{proj}/kernel", (h, h)))
            layout.append((f"{p}/attn/{proj}/bias", (h,)))
        layout.append((f"{p}/mlp/up/kernel", (h, 4 * h)))
        layout.append((f"{p}/mlp/up/bias", (4 * h,)))
        layout.append((f"{p}/mlp/down/kernel", (4 * h, h)))
        layout.append((f"{p}/mlp/down/bias", (h,)))
        for ln in ("ln_1", "ln_2"):
            layout.append((f"{p}/{ln}/gamma", (h,)))
            layout.append((f"{p}/{ln}/beta", (h,)))
    return layout


def w1_arrays(scale: float = 1.0) -> dict[str, np.ndarray]:
    """W1's variables as float32 arrays of N(0, 1) values (seed 0), by name (w1_layout)."""
    rng = np.random.default_rng(0)
    return {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in w1_layout(scale)}


def w2_count(scale: float) -> int:
    """Number of W2 variables at `scale`: 50,000 at scale 1, at least 10."""
    return max(10, int(round(_W2_COUNT * min(scale, 1.0))))


def w2_layout(scale: float = 1.0) -> list[tuple[str, tuple[int, ...]]]:
    """W2: many small variables, "small/v000000" ... of 64 float32 each (50,000 at scale 1)."""
    return [(f"small/v{i:06d}", (_W2_SIZE,)) for i in range(w2_count(scale))]


def _generate(workload: Workload, seed: int) -> None:
    """Writes the workload's values: N(0, 0.02) float32, one generator per workload seed."""
    rng = np.random.default_rng(seed)
    workload.source.parent.mkdir(parents=True, exist_ok=True)
    with open(workload.source, "wb") as f:
        for v in workload.variables:
            value = rng.standard_normal(v.size, dtype=np.float32)
            value *= np.float32(0.02)
            value.tofile(f)


def build_workloads(workdir: Path, scale: float, w2_scale: float | None = None) -> dict[str, Workload]:
    """Generates W1 and W2 under `workdir/source/` (not timed) and returns them.

    Deterministic: the same `scale` gives the same bytes on every run; `w2_scale`
    (default `scale`) sets W2's variable count on its own.
    """
    w2_scale = scale if w2_scale is None else w2_scale
    src = workdir / "source"
    w1 = Workload("W1", _with_offsets(w1_layout(scale)), src / "W1.bin",
                  f"{_W1_LAYERS} transformer layers, hidden {w1_hidden(scale)}, float32")
    w2 = Workload("W2", _with_offsets(w2_layout(w2_scale)), src / "W2.bin",
                  f"{w2_count(w2_scale)} variables of {_W2_SIZE} float32")
    for seed, w in enumerate((w1, w2), start=1):
        _generate(w, seed)
        (src / f"{w.name}.json").write_text(json.dumps(w.to_json()))
    return {"W1": w1, "W2": w2}


def load_workload(workdir: Path, name: str) -> Workload:
    """Reads the layout written by `build_workloads` (used by worker processes)."""
    return Workload.from_json(json.loads((workdir / "source" / f"{name}.json").read_text()))
