"""Initializers: callables (shape, dtype, name=...) -> host NumPy array, with TF2 Keras formulas.

Formulas and defaults follow tf.keras.initializers (TF 2.x): fans as
`_compute_fans`, VarianceScaling with the 0.87962566103423978 truncated-normal
correction, Orthogonal via QR with the sign fix, Identity for 2-D shapes.
TF1's spellings with TF1's defaults (tf.compat.v1.random_normal_initializer,
stddev 1.0, ...) live in initializers_v1.py and reuse these formulas.
Randomness is reproducible from (seed, full variable name): the same seed and
name give the same values whatever the creation order. Knows nothing about
variables, stores or devices; never does file I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, Union, cast

import numpy as np
import numpy.typing as npt

from varstore import dtypes
from varstore.errors import InitializerError

__all__ = [
    "Initializer", "InitializerFunction", "ShapeLike",
    "Zeros", "Ones", "Constant", "RandomNormal", "TruncatedNormal", "RandomUniform",
    "VarianceScaling", "GlorotUniform", "GlorotNormal", "HeNormal", "HeUniform",
    "LecunNormal", "LecunUniform", "Orthogonal", "Identity",
    "zeros", "ones", "constant", "random_normal", "truncated_normal", "random_uniform",
    "variance_scaling", "glorot_uniform", "glorot_normal", "he_normal", "he_uniform",
    "lecun_normal", "lecun_uniform", "orthogonal", "identity",
    "set_random_seed", "get_random_seed", "compute_fans", "rng_for",
]

#: A shape: an int (one dimension) or a sequence of ints.
ShapeLike = Union[int, Sequence[int]]


class InitializerFunction(Protocol):
    """Any callable `(shape, dtype) -> array` used as an initializer (every `Initializer` is one).

    Called with the variable's shape (tuple of ints) and NumPy dtype; returns
    an array of that shape whose dtype casts ("same_kind") to `dtype`.
    """

    def __call__(self, shape: tuple[int, ...], dtype: np.dtype, /) -> npt.ArrayLike:
        """The initial value for a variable of `shape` and `dtype`."""


# TF2: stddev of a standard normal truncated to [-2, 2] is 0.87962566103423978.
_TRUNCATED_STDDEV_CORRECTION = 0.87962566103423978

_global_seed: int | None = None


def set_random_seed(seed: int | None) -> None:
    """Sets the seed random initializers use when they have no `seed=`, as tf.random.set_seed.

    With a seed, a variable's values depend only on (seed, full variable name);
    None returns to fresh entropy for every call.
    """
    global _global_seed
    if seed is not None and not isinstance(seed, (int, np.integer)):
        raise InitializerError(f"a random seed must be an int or None, got {seed!r}")
    _global_seed = None if seed is None else int(seed)


def get_random_seed() -> int | None:
    """The seed set by `set_random_seed`, or None."""
    return _global_seed


def rng_for(seed: int | None, name: str | None) -> np.random.Generator:
    """A NumPy Generator derived from sha256(f"{seed}/{name}"); fresh entropy when `seed` is None."""
    if seed is None:
        return np.random.default_rng()
    import hashlib  # here: import varstore stays light (issue 11)

    digest = hashlib.sha256(f"{int(seed)}/{name or ''}".encode("utf-8")).digest()
    words = np.frombuffer(digest, dtype="<u4").tolist()
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


def compute_fans(shape: tuple[int, ...]) -> tuple[float, float]:
    """(fan_in, fan_out) as TF2's `_compute_fans`.

    () -> (1, 1); (n,) -> (n, n); (in, out) -> (in, out); conv kernels
    (*receptive_field, in_channels, out_channels) -> (in_channels * rf,
    out_channels * rf) with rf = prod(receptive_field).
    """
    if len(shape) < 1:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    if len(shape) == 2:
        return float(shape[0]), float(shape[1])
    receptive_field = math.prod(shape[:-2])
    return float(shape[-2] * receptive_field), float(shape[-1] * receptive_field)


def _shape(shape: ShapeLike) -> tuple[int, ...]:
    result: tuple[int, ...]
    try:
        result = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else tuple(cast(Any, shape))))
    except TypeError:
        result = (int(cast(Any, shape)),)
    if any(d < 0 for d in result):
        raise InitializerError(f"shape {result} has a negative dimension")
    return result


def _float_dtype(dtype: npt.DTypeLike | None, who: str) -> np.dtype:
    dt = dtypes.as_dtype(np.float32 if dtype is None else dtype)
    if not dtypes.is_floating(dt):
        raise InitializerError(f"{who} makes floating-point values; dtype {dt.name} is not floating "
                               f"(use zeros, ones, constant or random_uniform for integers)")
    return dt


def _truncated_normal(rng: np.random.Generator, shape: tuple[int, ...], mean: float, stddev: float) -> npt.NDArray[np.float64]:
    """Normal(mean, stddev) with values beyond 2 stddev redrawn, as tf.random.truncated_normal."""
    values = rng.standard_normal(shape)
    bad = np.abs(values) > 2.0
    while bad.any():
        values[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(values) > 2.0
    return values * stddev + mean


class Initializer:
    """Base class: `init(shape, dtype=None, name=None)` returns a new host NumPy array.

    `name` is the full variable name; random subclasses derive their generator
    from (seed, name). Any plain callable `(shape, dtype) -> array` works as an
    initializer too.
    """

    seed: int | None = None

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        raise NotImplementedError

    def _rng(self, name: str | None) -> np.random.Generator:
        return rng_for(self.seed if self.seed is not None else _global_seed, name)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Zeros(Initializer):
    """All zeros (any dtype), as tf.keras.initializers.Zeros."""

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        return np.zeros(_shape(shape), dtype=dtypes.as_dtype(np.float32 if dtype is None else dtype))


class Ones(Initializer):
    """All ones (any numeric dtype), as tf.keras.initializers.Ones."""

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        return np.ones(_shape(shape), dtype=dtypes.as_dtype(np.float32 if dtype is None else dtype))


class Constant(Initializer):
    """A constant, as tf.keras.initializers.Constant / tf.compat.v1.constant_initializer.

    Args:
      value: a scalar, or an array that broadcasts to the shape or has exactly
        prod(shape) elements (reshaped in C order, as TF1's constant_initializer).
    """

    def __init__(self, value: npt.ArrayLike = 0.0) -> None:
        self.value = value

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        shape = _shape(shape)
        dt = dtypes.as_dtype(np.float32 if dtype is None else dtype)
        value = np.asarray(self.value)
        try:
            return np.array(np.broadcast_to(value, shape), dtype=dt)
        except ValueError:
            if value.size == math.prod(shape):
                return np.array(value.reshape(shape), dtype=dt)
            raise InitializerError(
                f"constant initializer of shape {value.shape} fits neither shape {shape} "
                f"(by broadcasting) nor its {math.prod(shape)} elements") from None


class RandomNormal(Initializer):
    """Normal(mean, stddev), as tf.keras.initializers.RandomNormal (defaults mean=0.0, stddev=0.05)."""

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        dt = _float_dtype(dtype, "random_normal")
        return self._rng(name).normal(self.mean, self.stddev, _shape(shape)).astype(dt)


class TruncatedNormal(Initializer):
    """Normal(mean, stddev) redrawn beyond 2 stddev, as tf.keras.initializers.TruncatedNormal (stddev=0.05)."""

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        dt = _float_dtype(dtype, "truncated_normal")
        return _truncated_normal(self._rng(name), _shape(shape), self.mean, self.stddev).astype(dt)


class RandomUniform(Initializer):
    """Uniform in [minval, maxval), as tf.keras.initializers.RandomUniform (defaults -0.05, 0.05).

    Integer dtypes draw integers in [minval, maxval) (TF2 allows this too).
    """

    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: int | None = None) -> None:
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        dt = dtypes.as_dtype(np.float32 if dtype is None else dtype)
        rng = self._rng(name)
        if dt.kind in "iu":
            return rng.integers(int(self.minval), int(self.maxval), _shape(shape), endpoint=False).astype(dt)
        _float_dtype(dt, "random_uniform")
        return rng.uniform(self.minval, self.maxval, _shape(shape)).astype(dt)


class VarianceScaling(Initializer):
    """Scale-aware random values, as tf.keras.initializers.VarianceScaling (TF2).

    scale /= max(1, n) with n = fan_in, fan_out or (fan_in + fan_out) / 2 by
    `mode`; then "truncated_normal" (alias "normal"): truncated normal with
    stddev = sqrt(scale) / 0.87962566103423978; "untruncated_normal": normal
    with stddev = sqrt(scale); "uniform": uniform in [-limit, limit] with
    limit = sqrt(3 * scale).

    Raises:
      InitializerError: scale <= 0, or an unknown mode or distribution.
    """

    def __init__(self, scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal",
                 seed: int | None = None) -> None:
        if scale <= 0.0:
            raise InitializerError(f"variance_scaling needs scale > 0, got {scale}")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise InitializerError(f"variance_scaling mode must be 'fan_in', 'fan_out' or 'fan_avg', got {mode!r}")
        distribution = distribution.lower()
        if distribution == "normal":
            distribution = "truncated_normal"
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform"):
            raise InitializerError(
                "variance_scaling distribution must be 'truncated_normal', 'untruncated_normal' or "
                f"'uniform', got {distribution!r}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        dt = _float_dtype(dtype, type(self).__name__)
        shape = _shape(shape)
        fan_in, fan_out = compute_fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        scale = self.scale / max(1.0, n)
        rng = self._rng(name)
        if self.distribution == "truncated_normal":
            values = _truncated_normal(rng, shape, 0.0, math.sqrt(scale) / _TRUNCATED_STDDEV_CORRECTION)
        elif self.distribution == "untruncated_normal":
            values = rng.normal(0.0, math.sqrt(scale), shape)
        else:
            limit = math.sqrt(3.0 * scale)
            values = rng.uniform(-limit, limit, shape)
        return values.astype(dt)


class GlorotUniform(VarianceScaling):
    """Uniform in [-sqrt(6 / (fan_in + fan_out)), +...], as tf.keras.initializers.GlorotUniform."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_avg", "uniform", seed)


class GlorotNormal(VarianceScaling):
    """Truncated normal, stddev sqrt(2 / (fan_in + fan_out)) before truncation, as tf.keras.initializers.GlorotNormal."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_avg", "truncated_normal", seed)


class HeNormal(VarianceScaling):
    """Truncated normal, stddev sqrt(2 / fan_in), as tf.keras.initializers.HeNormal."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(2.0, "fan_in", "truncated_normal", seed)


class HeUniform(VarianceScaling):
    """Uniform in [-sqrt(6 / fan_in), +...], as tf.keras.initializers.HeUniform."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(2.0, "fan_in", "uniform", seed)


class LecunNormal(VarianceScaling):
    """Truncated normal, stddev sqrt(1 / fan_in), as tf.keras.initializers.LecunNormal."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_in", "truncated_normal", seed)


class LecunUniform(VarianceScaling):
    """Uniform in [-sqrt(3 / fan_in), +...], as tf.keras.initializers.LecunUniform."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_in", "uniform", seed)


class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix times `gain`, as tf.keras.initializers.Orthogonal.

    The shape is flattened to (prod(shape[:-1]), shape[-1]); QR of a normal
    matrix of shape (max, min), columns multiplied by sign(diag(R)),
    transposed when rows < cols.

    Raises:
      InitializerError: fewer than 2 dimensions.
    """

    def __init__(self, gain: float = 1.0, seed: int | None = None) -> None:
        self.gain, self.seed = gain, seed

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        dt = _float_dtype(dtype, "orthogonal")
        shape = _shape(shape)
        if len(shape) < 2:
            raise InitializerError(f"orthogonal needs a shape with at least 2 dimensions, got {shape}")
        rows, cols = math.prod(shape[:-1]), shape[-1]
        flat = (max(rows, cols), min(rows, cols))
        a = self._rng(name).standard_normal(flat)
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return (self.gain * q.reshape(shape)).astype(dt)


class Identity(Initializer):
    """`gain` times the identity matrix (eye(rows, cols) for non-square), as tf.keras.initializers.Identity.

    Raises:
      InitializerError: the shape is not 2-D.
    """

    def __init__(self, gain: float = 1.0) -> None:
        self.gain = gain

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        shape = _shape(shape)
        if len(shape) != 2:
            raise InitializerError(f"identity needs a 2-D shape, got {shape}")
        dt = dtypes.as_dtype(np.float32 if dtype is None else dtype)
        return (self.gain * np.eye(shape[0], shape[1])).astype(dt)


# snake_case aliases, as tf.keras.initializers.zeros, glorot_uniform, ...
zeros = Zeros
ones = Ones
constant = Constant
random_normal = RandomNormal
truncated_normal = TruncatedNormal
random_uniform = RandomUniform
variance_scaling = VarianceScaling
glorot_uniform = GlorotUniform
glorot_normal = GlorotNormal
he_normal = HeNormal
he_uniform = HeUniform
lecun_normal = LecunNormal
lecun_uniform = LecunUniform
orthogonal = Orthogonal
identity = Identity
