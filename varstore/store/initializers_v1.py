"""TF1 initializer spellings (tf.compat.v1.*_initializer) with TF1 defaults, beside the TF2 ones in initializers.py.

TF keeps both: `tf.compat.v1.random_normal_initializer()` draws with
stddev 1.0, `tf.keras.initializers.RandomNormal()` (and TF2's
`tf.random_normal_initializer`) with 0.05. Only the defaults and the
constant fill rule differ; the formulas are initializers.py's (same
generator from (seed, variable name), same fans, same truncation). Each
class also takes TF1's `dtype=` (used when the call gives none). Knows
nothing about variables, stores or devices; never does file I/O.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes, initializers
from varstore.errors import InitializerError
from varstore.initializers import ShapeLike

__all__ = [
    "Zeros", "Ones", "Constant", "RandomNormal", "TruncatedNormal", "RandomUniform", "VarianceScaling",
    "GlorotUniform", "GlorotNormal", "Orthogonal",
    "zeros_initializer", "ones_initializer", "constant_initializer", "random_normal_initializer",
    "truncated_normal_initializer", "random_uniform_initializer", "variance_scaling_initializer",
    "glorot_uniform_initializer", "glorot_normal_initializer", "orthogonal_initializer",
]


class _DtypeDefault:
    """TF1's constructor `dtype=`: the dtype a call without one uses (float32 when neither gives one)."""

    _dtype: np.dtype | None = None

    def _with_dtype(self, dtype: npt.DTypeLike | None) -> npt.DTypeLike | None:
        return self._dtype if dtype is None else dtype

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        """The TF2 initializer's call with this initializer's `dtype` when the call gives none."""
        call = super().__call__  # type: ignore[misc]  # the initializer class after this mixin in the MRO
        result: npt.NDArray[Any] = call(shape, self._with_dtype(dtype), name=name)
        return result


def _as_dtype(dtype: npt.DTypeLike | None) -> np.dtype | None:
    return None if dtype is None else dtypes.as_dtype(dtype)


class Zeros(_DtypeDefault, initializers.Zeros):
    """All zeros, as tf.compat.v1.zeros_initializer(dtype=tf.float32)."""

    def __init__(self, dtype: npt.DTypeLike | None = None) -> None:
        self._dtype = _as_dtype(dtype)


class Ones(_DtypeDefault, initializers.Ones):
    """All ones, as tf.compat.v1.ones_initializer(dtype=tf.float32)."""

    def __init__(self, dtype: npt.DTypeLike | None = None) -> None:
        self._dtype = _as_dtype(dtype)


class Constant(_DtypeDefault, initializers.Initializer):
    """A constant, as tf.compat.v1.constant_initializer(value=0, dtype=tf.float32, verify_shape=False).

    `value` is flattened in C order; with fewer elements than the shape holds,
    the rest are filled with its last element (a scalar fills everything), as
    tf.compat.v1.constant: [0..7] for shape (3, 4) gives rows [0 1 2 3],
    [4 5 6 7], [7 7 7 7].

    Raises:
      InitializerError: more elements than the shape holds ("Too many elements
        provided. Needed at most 6, but received 8", TF's ValueError), an empty
        value for a non-empty shape, or, with `verify_shape`, a value whose
        shape is not the variable's (TF raises TypeError there).
    """

    def __init__(self, value: npt.ArrayLike = 0, dtype: npt.DTypeLike | None = None, verify_shape: bool = False) -> None:
        self.value = value
        self._dtype = _as_dtype(dtype)
        self.verify_shape = bool(verify_shape)

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        full = initializers._shape(shape)
        wanted = self._with_dtype(dtype)
        dt = dtypes.as_dtype(np.float32 if wanted is None else wanted)
        value = np.asarray(self.value)
        if self.verify_shape and value.shape != full:
            raise InitializerError(f"constant_initializer(verify_shape=True): expected the value's shape to be "
                                   f"{full}, got {value.shape}")
        flat = value.reshape(-1)
        needed = math.prod(full)
        if flat.size > needed:
            raise InitializerError(f"constant_initializer: too many elements provided for shape {full}: "
                                   f"needed at most {needed}, but received {flat.size}")
        if flat.size < needed:
            if flat.size == 0:
                raise InitializerError(f"constant_initializer: an empty value cannot fill shape {full}")
            flat = np.concatenate([flat, np.repeat(flat[-1:], needed - flat.size)])
        return np.array(flat.reshape(full), dtype=dt)


class RandomNormal(_DtypeDefault, initializers.RandomNormal):
    """Normal(mean, stddev), as tf.compat.v1.random_normal_initializer (defaults mean=0.0, stddev=1.0)."""

    def __init__(self, mean: float = 0.0, stddev: float = 1.0, seed: int | None = None,
                 dtype: npt.DTypeLike | None = None) -> None:
        super().__init__(mean, stddev, seed)
        self._dtype = _as_dtype(dtype)


class TruncatedNormal(_DtypeDefault, initializers.TruncatedNormal):
    """Normal(mean, stddev) redrawn beyond 2 stddev, as tf.compat.v1.truncated_normal_initializer (stddev=1.0)."""

    def __init__(self, mean: float = 0.0, stddev: float = 1.0, seed: int | None = None,
                 dtype: npt.DTypeLike | None = None) -> None:
        super().__init__(mean, stddev, seed)
        self._dtype = _as_dtype(dtype)


class RandomUniform(_DtypeDefault, initializers.RandomUniform):
    """Uniform in [minval, maxval), as tf.compat.v1.random_uniform_initializer (defaults 0.0 and None: 1.0 for floats).

    Raises:
      InitializerError: an integer dtype without `maxval` (TF: "Must specify maxval for integer dtype").
    """

    def __init__(self, minval: float = 0.0, maxval: float | None = None, seed: int | None = None,
                 dtype: npt.DTypeLike | None = None) -> None:
        super().__init__(minval, 1.0 if maxval is None else maxval, seed)
        self._maxval_given = maxval is not None
        self._dtype = _as_dtype(dtype)

    def __call__(self, shape: ShapeLike, dtype: npt.DTypeLike | None = None, *, name: str | None = None) -> npt.NDArray[Any]:
        wanted = self._with_dtype(dtype)
        if wanted is not None and dtypes.as_dtype(wanted).kind in "iu" and not self._maxval_given:
            raise InitializerError(f"random_uniform_initializer needs maxval for integer dtype "
                                   f"{dtypes.as_dtype(wanted).name} (as TF)")
        return super().__call__(shape, wanted, name=name)


class VarianceScaling(_DtypeDefault, initializers.VarianceScaling):
    """As tf.compat.v1.variance_scaling_initializer (scale=1.0, mode="fan_in", distribution="truncated_normal").

    "normal" is TF1's deprecated alias of "truncated_normal"; the formulas are
    `initializers.VarianceScaling`'s (TF1 and TF2 share them).
    """

    def __init__(self, scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal",
                 seed: int | None = None, dtype: npt.DTypeLike | None = None) -> None:
        super().__init__(scale, mode, distribution, seed)
        self._dtype = _as_dtype(dtype)


class GlorotUniform(VarianceScaling):
    """Uniform in [-sqrt(6 / (fan_in + fan_out)), +...], as tf.compat.v1.glorot_uniform_initializer."""

    def __init__(self, seed: int | None = None, dtype: npt.DTypeLike | None = None) -> None:
        super().__init__(1.0, "fan_avg", "uniform", seed, dtype)


class GlorotNormal(VarianceScaling):
    """Truncated normal, stddev sqrt(2 / (fan_in + fan_out)) before truncation, as tf.compat.v1.glorot_normal_initializer."""

    def __init__(self, seed: int | None = None, dtype: npt.DTypeLike | None = None) -> None:
        super().__init__(1.0, "fan_avg", "truncated_normal", seed, dtype)


class Orthogonal(_DtypeDefault, initializers.Orthogonal):
    """A (semi-)orthogonal matrix times `gain`, as tf.compat.v1.orthogonal_initializer(gain=1.0)."""

    def __init__(self, gain: float = 1.0, seed: int | None = None, dtype: npt.DTypeLike | None = None) -> None:
        super().__init__(gain, seed)
        self._dtype = _as_dtype(dtype)


# The spellings TF1 code uses (tf.random_normal_initializer() in TF 1.x is tf.compat.v1.random_normal_initializer).
zeros_initializer = Zeros
ones_initializer = Ones
constant_initializer = Constant
random_normal_initializer = RandomNormal
truncated_normal_initializer = TruncatedNormal
random_uniform_initializer = RandomUniform
variance_scaling_initializer = VarianceScaling
glorot_uniform_initializer = GlorotUniform
glorot_normal_initializer = GlorotNormal
orthogonal_initializer = Orthogonal
