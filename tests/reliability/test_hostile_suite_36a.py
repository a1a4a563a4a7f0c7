"""Hostile-input cases of issue 36 (part A), each built from bytes and run in a child under RLIMIT_AS and a timeout.

The classes: a far memo index after Python 2 numbering (still refused), a BUILD that would change the
unpickler's shared stand-ins, JSON nested too deep for Python (safetensors header, HF index, .keras
metadata.json, Keras sharded index, Orbax _METADATA, the manager's pointer), declared sizes NumPy cannot
make or that the stored bytes cannot back (DCP, Orbax), a manager pointer entry without "time", torch
DCP's CheckpointException while converting a damaged source, and thousands of stride-0 views that would
make GBs of a few hundred KB. Each case asserts one typed error line and exit status 2 (or the typed
error class through the API), a peak RSS far below what the file declares, nothing left in the child's
TMPDIR, and nothing written, changed or deleted in the test's folder (tests/reliability/_hostile_run.py).
"""

from __future__ import annotations

import json
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from tests.convert.test_hostile_archives import _torch_zip
from tests.reliability._hostile_run import changed_paths, run_hostile, tree_state
from tests.reliability._legacy_files import _Py2Pickle, legacy_torch_py2, lpips_alex_v01
from varstore.errors import CorruptCheckpointError
from varstore.formats._restricted_pickle import _ALLOWED, unpickle

#: Peak RSS a refused file may cost a child (MiB): imports take about 60-250 (torch for DCP); every
#: declared size is in GiB.
PEAK_MB = 600
DEEP = 200_000  # JSON nesting: far beyond Python's recursion limit


def _deep_json() -> bytes:
    return b'{"a": ' + b"[" * DEEP + b"]" * DEEP + b"}"


# -- builders: each makes one hostile file or directory in `folder` and returns the path to open
def py2_far_memo(folder: Path) -> Path:
    """Python 2 numbering (BINPUT 1), then LONG_BINPUT 150,000,000: the slack for Py2 is one index, no more."""
    return _torch_zip(folder / "memo.pt", b"\x80\x02}q\x01]q\x02r\x80\xd1\xf0\x08.")


def build_on_stand_in(folder: Path) -> Path:
    """A BUILD setting `_rebuild_tensor_v2.__defaults__` (a process-global function) through its slot state."""
    return _torch_zip(folder / "build.pt", _BUILD_DEFAULTS)


_BUILD_DEFAULTS = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nN}X\x0c\x00\x00\x00__defaults__\x88NN\x87s\x86b."


def deep_safetensors(folder: Path) -> Path:
    header = b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "x": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    path = folder / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    return path


def deep_hf_index(folder: Path) -> Path:
    model = folder / "model"
    vs.convert(vs.save(folder / "m.h5", {"a": np.ones(3, np.float32)}), model, max_shard_size="1KB")
    (folder / "m.h5").unlink()
    (model / "model.safetensors.index.json").write_bytes(_deep_json())
    return model


def deep_keras_metadata(folder: Path, fixtures: Path) -> Path:
    path = folder / "model.keras"
    with zipfile.ZipFile(fixtures / "keras3" / "model.keras") as source, zipfile.ZipFile(path, "w") as out:
        for info in source.infolist():
            data = _deep_json() if info.filename == "metadata.json" else source.read(info)
            out.writestr(info, data)
    return path


def deep_keras_index(folder: Path, fixtures: Path) -> Path:
    shutil.copytree(fixtures / "keras3_sharded", folder / "sharded")
    (folder / "sharded" / "model.weights.json").write_bytes(_deep_json())
    return folder / "sharded" / "model.weights.json"


def deep_orbax_metadata(folder: Path, fixtures: Path) -> Path:
    shutil.copytree(fixtures / "orbax" / "no_ocdbt", folder / "orbax")
    (folder / "orbax" / "_METADATA").write_bytes(_deep_json())
    return folder / "orbax"


def orbax_huge_leaf(folder: Path, fixtures: Path) -> Path:
    """An Orbax leaf whose .zarray declares 2^40 float32 elements over its few stored bytes."""
    shutil.copytree(fixtures / "orbax" / "no_ocdbt", folder / "orbax")
    meta_path = folder / "orbax" / "weights.mlp.fc.bias" / ".zarray"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = [1 << 40] + meta["shape"][1:]
    meta_path.write_text(json.dumps(meta))
    return folder / "orbax"


def _dcp_metadata(directory: Path, change: Callable[[object], None]) -> None:
    import pickle

    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    dcp.save({"w": torch.arange(262144, dtype=torch.float32)}, checkpoint_id=str(directory), no_dist=True)
    metadata = dcp.FileSystemReader(str(directory)).read_metadata()  # torch's own reader of its own file
    change(metadata)
    with open(directory / ".metadata", "wb") as handle:
        pickle.dump(metadata, handle)


def dcp_aliased_chunks(folder: Path) -> Path:
    """3,000 chunk records of one tensor all naming the same 1 MiB of its data file: 3 GiB declared."""
    pytest.importorskip("torch")
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

    def alias(metadata: object) -> None:
        item = metadata.state_dict_metadata["w"]  # type: ignore[attr-defined]
        (index, info), = [(k, v) for k, v in metadata.storage_data.items() if k.fqn == "w"]  # type: ignore[attr-defined]
        count = 3000
        item.size = (262144 * count,)
        item.chunks = [ChunkStorageMetadata(offsets=(262144 * i,), sizes=(262144,)) for i in range(count)]
        for i in range(count):
            metadata.storage_data[MetadataIndex("w", (262144 * i,))] = info  # type: ignore[attr-defined]

    _dcp_metadata(folder / "dcp", alias)
    return folder / "dcp"


def dcp_impossible_shape(folder: Path) -> Path:
    """A tensor of shape (2^64, 0): no bytes, no chunks, and no array NumPy can make (a bare ValueError)."""

    def widen(metadata: object) -> None:
        item = metadata.state_dict_metadata["w"]  # type: ignore[attr-defined]
        item.size, item.chunks = (1 << 64, 0), []

    _dcp_metadata(folder / "dcp", widen)
    return folder / "dcp"


def manager_without_time(folder: Path) -> Path:
    directory = folder / "run"
    manager = vs.CheckpointManager(directory, max_to_keep=1)
    manager.save({"w": np.arange(4.0)}, step=1)
    state = json.loads((directory / "latest").read_text())
    for entry in state["checkpoints"]:
        del entry["time"]
    (directory / "latest").write_text(json.dumps(state))
    return directory


def damaged_h5(folder: Path) -> Path:
    path = vs.save(folder / "src.h5", {"w": np.arange(100_000, dtype=np.float32)})
    data = bytearray(Path(path).read_bytes())
    data[data.find(np.arange(1000, 1010, dtype=np.float32).tobytes())] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    return Path(path)


def stride0_views(folder: Path, count: int = 2500) -> Path:
    """A legacy torch file of `count` 4-byte storages, each viewed as 256K elements with stride 0:
    about 150 KB that would make count MiB (2.4 GiB) of tensors."""
    keys = [str(i) for i in range(count)]
    p = _Py2Pickle().raw(b"}").memo().raw(b"(")
    for key in keys:
        p.str_(f"w{key}").global_("torch._utils", "_rebuild_tensor_v2").raw(b"(")
        p.raw(b"(").str_("storage").global_("torch", "FloatStorage").str_(key).str_("cpu").int_(1).raw(b"Nt")
        p.memo().raw(b"Q").int_(0).tuple_of(262144).tuple_of(0).raw(b"\x89")
        p.global_("collections", "OrderedDict").raw(b")R").memo().raw(b"t").memo().raw(b"R").memo()
    body = bytes(legacy_torch_py2(folder / "head.pt", {"x": np.zeros(1, np.float32)}).read_bytes())
    (folder / "head.pt").unlink()
    head = body[:body.index(b"\x80\x02\x63collections")]  # magic, protocol version, sys_info
    listed = _Py2Pickle().raw(b"]").memo().raw(b"(")
    for key in keys:
        listed.str_(key)
    records = b"".join(struct.pack("<q", 1) + struct.pack("<f", 1.5) for _ in keys)
    path = folder / "views.pt"
    path.write_bytes(head + p.raw(b"u").stop() + listed.raw(b"e").stop() + records)
    return path


#: case -> (builder, how it is run, what the typed error line must say)
CASES: dict[str, tuple[Callable[..., Path], str, str]] = {
    "far memo after Python 2 numbering": (py2_far_memo, "cli", "memo entry 150000000"),
    "BUILD on a shared stand-in": (build_on_stand_in, "cli", "stand-in for _rebuild_tensor_v2"),
    "deep JSON: safetensors header": (deep_safetensors, "cli", "nests deeper"),
    "deep JSON: HF sharded index": (deep_hf_index, "cli", "nests deeper"),
    "deep JSON: .keras metadata.json": (deep_keras_metadata, "cli", "nests deeper"),
    "deep JSON: Keras sharded index": (deep_keras_index, "cli", "nests deeper"),
    "deep JSON: Orbax _METADATA": (deep_orbax_metadata, "cli", "nests deeper"),
    "Orbax leaf declaring 4 TiB": (orbax_huge_leaf, "convert", "'weights/mlp/fc/bias'"),
    "DCP chunks aliasing 1 MiB as 3 GiB": (dcp_aliased_chunks, "convert", "'w'"),
    "DCP shape NumPy cannot make": (dcp_impossible_shape, "convert", "'w'"),
    "stride-0 views of 4-byte storages": (stride0_views, "cli", "stride-0"),
}
_NEEDS_FIXTURES = {deep_keras_metadata, deep_keras_index, deep_orbax_metadata, orbax_huge_leaf}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_case_is_one_typed_line_in_bounded_memory_touching_nothing(
        tmp_path: Path, fixtures_dir: Path, case: str) -> None:
    build, how, needle = CASES[case]
    folder = tmp_path / "area"
    folder.mkdir()
    path = build(folder, fixtures_dir) if build in _NEEDS_FIXTURES else build(folder)
    before = tree_state(tmp_path)
    outcomes = [run_hostile("cli", ["convert", str(path), str(tmp_path / "out.h5")], timeout_s=120)]
    if how == "cli":
        outcomes.append(run_hostile("cli", ["ls", str(path)], timeout_s=120))
    outcomes.append(run_hostile("api", ["load", str(path)], timeout_s=120))
    for outcome in outcomes[:-1]:
        assert outcome.status == "exit2" and outcome.stderr.count("\n") == 1, (case, outcome)
        assert needle in outcome.stderr and "Traceback" not in outcome.stderr, (case, outcome.stderr)
    assert outcomes[-1].status == "typed", (case, outcomes[-1])
    for outcome in outcomes:
        assert outcome.peak_rss_mb is not None and outcome.peak_rss_mb < PEAK_MB, (case, outcome.peak_rss_mb)
        assert outcome.tmp_left == [], (case, outcome.tmp_left)
    assert changed_paths(before, tree_state(tmp_path)) == [], case
    assert not (tmp_path / "out.h5").exists()


def test_manager_pointer_without_time_is_a_typed_error_and_deletes_nothing(tmp_path: Path) -> None:
    directory = manager_without_time(tmp_path)
    before = tree_state(tmp_path)
    saved = run_hostile("api", ["manager_save", str(directory), "1", "2"], timeout_s=120)
    assert saved.status == "typed" and saved.error == "CorruptCheckpointError", saved
    assert "checkpoints[0]" in saved.message and "rebuild_state" in saved.message, saved.message
    restored = run_hostile("api", ["restore_latest", str(directory)], timeout_s=120)
    assert restored.status == "typed" and restored.error == "CorruptCheckpointError", restored
    assert changed_paths(before, tree_state(tmp_path)) == []
    for outcome in (saved, restored):
        assert outcome.peak_rss_mb is not None and outcome.peak_rss_mb < PEAK_MB


def test_dcp_checkpoint_exception_on_a_damaged_source_is_one_line_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    source = damaged_h5(tmp_path)
    before = tree_state(tmp_path)
    outcome = run_hostile("cli", ["convert", "--to", "dcp", str(source), str(tmp_path / "out_dcp")], timeout_s=180)
    assert outcome.status == "exit2" and outcome.stderr.count("\n") == 1, outcome
    assert "variable 'w'" in outcome.stderr and "crc32c" in outcome.stderr and "Traceback" not in outcome.stderr
    assert outcome.tmp_left == []
    assert changed_paths(before, tree_state(tmp_path)) == []


def test_a_build_on_a_stand_in_cannot_change_what_the_next_read_sees(tmp_path: Path) -> None:
    """File A BUILDs on allowed globals (a function's __defaults__, a class attribute, a dtype's name); each
    gets a typed error, and file B read afterwards in the same process gives exactly what it gave before."""
    good = legacy_torch_py2(tmp_path / "alex.pth", lpips_alex_v01())

    def read_b() -> dict[str, tuple[object, ...]]:
        with vs.open_checkpoint(good) as reader:
            return {k: (reader.info(k).trainable, reader.info(k).dtype, reader[k].tobytes()) for k in reader.keys()}

    first = read_b()
    function = _ALLOWED["torch._utils._rebuild_tensor_v2"]
    attacks = [_BUILD_DEFAULTS,
               b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n}X\x04\x00\x00\x00evil\x88sb.",  # __dict__ update
               b"\x80\x02ctorch\nTensor\nN}X\x04\x00\x00\x00evil\x88s\x86b.",  # a class's attribute
               b"\x80\x02ctorch\nfloat32\nN}X\x04\x00\x00\x00name\x58\x07\x00\x00\x00float64s\x86b.",
               b"\x80\x02ctorch\nFloatStorage\n}X\x05\x00\x00\x00dtypeX\x07\x00\x00\x00float64sb."]
    for attack in attacks:
        with pytest.raises(CorruptCheckpointError, match="file A: .*(stand-in|state)"):
            unpickle(attack, "file A", {})
    assert read_b() == first
    assert function.function.__defaults__ == (False, None, None) and not hasattr(function, "evil")
    assert _ALLOWED["torch.float32"].name == "float32" and _ALLOWED["torch.FloatStorage"].dtype == "float32"
    assert "evil" not in vars(_ALLOWED["torch.Tensor"])


def test_memo_bound_allows_python2_numbering_and_nothing_further() -> None:
    from varstore.errors import UnsafeCheckpointError

    assert unpickle(b"\x80\x02}q\x01(X\x01\x00\x00\x00aq\x02K\x01u.", "py2", {}) == {"a": 1}  # from 1
    assert unpickle(b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01K\x01u.", "py3", {}) == {"a": 1}  # from 0
    with pytest.raises(UnsafeCheckpointError, match="memo entry 2 after only 0 entries"):
        unpickle(b"\x80\x02}q\x02.", "skip", {})
    with pytest.raises(CorruptCheckpointError, match="reads memo entry 0, which was never stored"):
        unpickle(b"\x80\x02}q\x01h\x00.", "get", {})


def test_stride0_views_open_once_the_user_raises_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from varstore.errors import ValueTooLargeError

    path = stride0_views(tmp_path, count=40)  # 160 stored bytes viewed as 40 MiB
    with pytest.raises(ValueTooLargeError, match=r"declare 41,943,040 bytes but its storages hold 160 bytes.*"
                                                 r"VARSTORE_MAX_BYTES to at least 41943040"):
        vs.open_checkpoint(path)
    monkeypatch.setenv("VARSTORE_MAX_BYTES", str(64 << 20))
    with vs.open_checkpoint(path) as reader:
        assert len(reader.keys()) == 40 and reader.info("w7").attributes["stride"] == [0]
        value = reader["w7"]
    assert value.shape == (262144,) and np.all(value == np.float32(1.5))
