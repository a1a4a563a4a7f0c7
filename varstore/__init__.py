"""varstore: model variables and checkpoints without a framework.

The whole public API is re-exported here.
"""

from __future__ import annotations

from varstore import _core_api
from varstore._core_api import *  # noqa: F401,F403

__version__ = "0.1.0"

__all__ = list(_core_api.__all__)
