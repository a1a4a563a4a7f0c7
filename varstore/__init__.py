"""varstore: model variables and checkpoints without a framework.

The whole public API is re-exported here.
"""

from __future__ import annotations

__version__ = "0.1.0"
