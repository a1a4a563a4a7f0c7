"""The package version, one string; the only place it is written.

Imported by `varstore/__init__.py` (as `varstore.__version__`), the checkpoint
writer (the manifest's `library_version`) and the CLI (`--version`). Imports
nothing, so any module may read it without an import cycle.
"""

from __future__ import annotations

__all__ = ["__version__"]

#: PEP 440 version of the distribution; keep equal to `version` in pyproject.toml.
__version__ = "0.1.0"
