"""Which Keras 3 weights are not trainable, from what a Keras file records (it has no per-weight flag).

What a file does say:

- every variable under the top-level "optimizer" group is optimizer state: Keras' BaseOptimizer creates its
  iterations, learning rate and slot variables with trainable=False. False.
- a `.keras` archive's config.json gives each layer's `trainable`; a layer saved with `"trainable": false`
  (or a model saved so) holds only non-trainable weights, its sublayers' included (Keras' Layer.trainable
  setter sets theirs too). Every weight under that layer's path: False.

Nothing else is decided: a trainable layer may still own non-trainable weights (BatchNormalization's moving
mean and variance), and its config does not say which, so they stay unknown (None).

Config layers are matched to weight paths through the `name` attribute Keras writes on each "<path>/vars"
group: a model's (or nested model's) layers live at "<model path>layers/<segment>" ("_layer_checkpoint_dependencies"
in Keras 3.0). A layer whose name no such group carries, or two groups carry, is left undecided.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from varstore._limits import load_json
from varstore.errors import VarstoreError
from varstore.formats._zip_members import ZIP_ERRORS, read_member

__all__ = ["CONFIG_MEMBER", "MAX_CONFIG_BYTES", "read_config", "not_trainable"]

#: The model configuration member of a `.keras` archive.
CONFIG_MEMBER = "config.json"
#: Most bytes of config.json read (Keras writes a few KiB per layer); a larger one is not used.
MAX_CONFIG_BYTES = 64 << 20
_LAYER_LISTS = ("layers", "_layer_checkpoint_dependencies")


def read_config(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(config.json of the `.keras` zip at `path`, None) or (None, why it is not used); (None, None) when the
    archive has none. Never raises for a damaged, oversized or malformed config: the weights stay readable."""
    label = f"Keras archive '{path}'"
    try:
        with zipfile.ZipFile(path) as archive:
            info = next((i for i in archive.infolist() if i.filename == CONFIG_MEMBER), None)
            if info is None:
                return None, None
            config = load_json(read_member(archive, info, MAX_CONFIG_BYTES, label).decode("utf-8"),
                               f"{label} ({CONFIG_MEMBER})")
    except (VarstoreError, UnicodeDecodeError, *ZIP_ERRORS) as err:
        return None, f"not used, trainable flags of frozen layers unknown: {err}"
    if not isinstance(config, dict):
        return None, "not used, trainable flags of frozen layers unknown: not a JSON object"
    return config, None


def not_trainable(names: Iterable[str], vars_names: Mapping[str, str],
                  config: Mapping[str, Any] | None) -> dict[str, bool]:
    """{weight path: False} for the weights the file says are not trainable (see the module docstring).

    Args:
      names: the weight paths ("layers/dense/vars/0", "optimizer/vars/3").
      vars_names: "<owner path>/vars" group -> its `name` attribute ("layers/dense/vars" -> "dense_hidden").
      config: the archive's config.json, or None (a `.weights.h5` file alone).
    """
    frozen = ["optimizer/"]
    model = config.get("config") if config is not None else None
    if isinstance(model, Mapping):
        if model.get("trainable") is False:
            frozen.append("")
        else:
            _frozen_layers(model, "", vars_names, frozen)
    return {name: False for name in names if any(name.startswith(prefix) for prefix in frozen)}


def _frozen_layers(model: Mapping[str, Any], prefix: str, vars_names: Mapping[str, str], frozen: list[str],
                   depth: int = 0) -> None:
    """Appends to `frozen` the path ("<owner>/") of each non-trainable layer of `model` saved under `prefix`."""
    layers = model.get("layers")
    if not isinstance(layers, list) or depth > 64:
        return
    owners: dict[str, list[str]] = {}
    for group, name in vars_names.items():
        owner = group[: -len("/vars")] if group.endswith("/vars") else ""
        parent, _, segment = owner.rpartition("/")
        if segment and any(parent == prefix + lists for lists in _LAYER_LISTS):
            owners.setdefault(name, []).append(owner)
    for layer in layers:
        config = layer.get("config") if isinstance(layer, Mapping) else None
        if not isinstance(config, Mapping):
            continue
        name = config.get("name", layer.get("name"))
        found = owners.get(name) if isinstance(name, str) else None
        if not found or len(found) != 1:
            continue
        if config.get("trainable") is False:
            frozen.append(found[0] + "/")
        else:
            _frozen_layers(config, found[0] + "/", vars_names, frozen, depth + 1)
