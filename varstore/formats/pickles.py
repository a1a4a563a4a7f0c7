"""The pickle refusal: pickle-based files no reader claims are refused, never unpickled.

A zip with a misplaced data.pkl or pickle members, or a raw pickle that is no
torch.save file (varstore.formats.pytorch.reader claims those), raises
UnsafeFormatError naming the file, with what to do instead (TORCH_ADVICE).
Reads only what the probe holds; never imports pickle.
"""

from __future__ import annotations

from pathlib import Path

from varstore.errors import NotACheckpointError, UnsafeFormatError
from varstore.formats.probe import Probe

__all__ = ["TORCH_ADVICE", "PICKLE_SUFFIXES", "sniff", "refuse"]

#: Suffixes of pickle-based checkpoints (PyTorch and plain Python pickles).
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt")

#: What to do with a pickle that is not a torch.save state dict (part of UnsafeFormatError messages).
TORCH_ADVICE = (
    "Arbitrary Python pickles can run code when loaded, so varstore never unpickles them; it reads only "
    "torch.save files (zip or legacy) through a restricted unpickler that accepts tensors and containers. "
    "If this holds weights, re-save them in a trusted environment with torch installed: "
    "`sd = torch.load(path, map_location='cpu', weights_only=True)` then `torch.save(sd, 'weights.pt')` or "
    "`safetensors.torch.save_file({k: v.contiguous().clone() for k, v in sd.items()}, 'model.safetensors')`")


def sniff(probe: Probe) -> Path | None:
    """Refuses pickle-based files no reader claims; runs (from varstore.formats.pytorch.reader.sniff) after every
    other format's magic bytes were tried and the file is no torch.save file.

    Raises:
      UnsafeFormatError: a zip with a misplaced data.pkl, a zip of pickles, or a raw pickle.
      NotACheckpointError: a zip archive no format claimed.
    """
    names = probe.zip_names
    if names is not None:
        if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            raise UnsafeFormatError(f"refusing '{probe.path}': it holds a data.pkl but not where torch.save puts "
                                    f"it ('<archive>/data.pkl'). {TORCH_ADVICE}")
        if any(n.endswith(".pkl") for n in names):
            raise UnsafeFormatError(f"refusing '{probe.path}': the zip holds pickle members "
                                    f"({', '.join(n for n in names if n.endswith('.pkl'))}). {TORCH_ADVICE}")
        raise NotACheckpointError(
            f"'{probe.path}' is a zip archive but neither a Keras .keras archive (model.weights.h5), "
            f"an .npz (.npy members) nor a PyTorch file")
    if probe.head[:1] == b"\x80" and probe.head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise UnsafeFormatError(f"refusing '{probe.path}': it is a Python pickle but not a torch.save file "
                                f"(no torch magic number). {TORCH_ADVICE}")
    return None


def refuse(path: Path, **_options: object) -> None:
    """The pickle refusal's `open`: reached by a .pkl/.pickle suffix alone (or format="pickle"); always refuses.

    Raises:
      UnsafeFormatError: always, naming the file and its suffix.
    """
    raise UnsafeFormatError(
        f"refusing '{path}': its suffix {path.suffix!r} marks a pickle-based (PyTorch) checkpoint and "
        f"its bytes match no safe format. {TORCH_ADVICE}")
