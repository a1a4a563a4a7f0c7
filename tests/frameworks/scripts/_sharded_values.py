"""The sharded-state tests' variables: names, shapes, dtypes, and each one's deterministic full value.

Shared by the rank scripts (imported by path: a script's folder is first on sys.path) and by
tests/frameworks/test_torch_sharded.py, so every rank and the test compare against the same values.
"""

from __future__ import annotations

import numpy as np
import torch

#: name -> (shape, dtype)
SHAPES = {"model/w": ((6, 4), torch.float32), "model/v": ((5, 3), torch.bfloat16), "model/b": ((4,), torch.float32),
          "model/odd": ((5,), torch.float64), "model/tiny": ((1, 3), torch.int32),
          "optim/state/0/exp_avg": ((6, 4), torch.float32)}


def full(name: str) -> torch.Tensor:
    """The whole value of variable `name`: 0.5 * its flat index plus a per-name offset, in its dtype."""
    shape, dtype = SHAPES[name]
    base = sum(map(ord, name)) % 97
    return (torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape) * 0.5 + base).to(dtype)
