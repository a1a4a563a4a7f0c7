"""Issue 36, part D: Python objects bounded by count, attributes over a cap listed, time bounded too.

Each hostile file is built from bytes (sparse where it claims gigabytes: a few KB on disk) and run through
the CLI in a fresh process under RLIMIT_AS (2 GiB) and a timeout (tests/reliability/_hostile_run.py),
asserting the typed error line and exit status 2 (or a clean, bounded output), a peak RSS far below what
the file claims, nothing read-modified, written or deleted in the test's folder and nothing left in the
child's TMPDIR. The time bombs assert on the work done (comparisons, output size), never on wall clock;
the subprocess timeout is only a hang guard.
"""

from __future__ import annotations

import difflib
import json
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from tests.convert.test_hostile_archives import _zip_with_raw_member
from tests.convert.tf_bundle_writer import entry_proto, header_proto, table
from tests.reliability._hostile_run import Outcome, changed_paths, run_hostile, tree_state
from varstore import open_checkpoint
from varstore._limits import ENV_MAX_OBJECTS, MAX_OBJECTS
from varstore.checkpoint.read import name_hints
from varstore.errors import ConversionError, CorruptCheckpointError, ValueTooLargeError
from varstore.formats.gguf.reader import MAX_ALIGNMENT, GGUFReader
from varstore.formats.gguf.writer import write_gguf
from varstore.formats.tensorflow.reader import TFCheckpointReader

#: Peak RSS a refused file may cost a child (MiB): imports take about 60-150; every claim is in GiB.
PEAK_MB = 400


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _gguf(path: Path, kvs: bytes, kv_count: int, size: int = 0) -> Path:
    """A GGUF v3 file of no tensors and these key-values, made `size` bytes long by a sparse tail."""
    with open(path, "wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, 0, kv_count) + kvs)
        out.truncate(max(size, out.tell() + 64))
    return path


def _gguf_empty_strings(folder: Path) -> Path:  # 300 M empty strings: 2.4 GB, sparse
    count = 300_000_000
    return _gguf(folder / "strings.gguf", _string(b"tokens") + struct.pack("<IIQ", 9, 8, count), 1, count * 8 + 64)


def _gguf_bytes(folder: Path) -> Path:  # 1 G uint8 items: tolist() would make an 8 GB list
    count = 1 << 30
    return _gguf(folder / "bytes.gguf", _string(b"blob") + struct.pack("<IIQ", 9, 0, count), 1, count + 64)


def _gguf_empty_arrays(folder: Path) -> Path:  # 100 M empty arrays: 100 M Python lists
    count = 100_000_000
    return _gguf(folder / "arrays.gguf", _string(b"nested") + struct.pack("<IIQ", 9, 9, count), 1,
                 count * 12 + 64)


def _tf_empty_strings(folder: Path) -> Path:
    """A TF bundle whose string tensor claims 10**9 empty strings, backed by a 1 GB sparse data shard."""
    count = 1_000_000_000
    prefix = folder / "model.ckpt"
    entry = entry_proto(7, (count,), 0, 0, count + 4, 0)
    (folder / "model.ckpt.index").write_bytes(table([(b"", header_proto(1)), (b"vocab", entry)]))
    with open(f"{prefix}.data-00000-of-00001", "wb") as out:
        out.truncate(count + 4)
    return prefix


#: class -> (builder, words the one error line must hold)
COUNT_CASES: dict[str, tuple[Callable[[Path], Path], list[str]]] = {
    "GGUF array of 300 M empty strings": (_gguf_empty_strings, ["'tokens'", "claims 300,000,000 items"]),
    "GGUF array of 1 G uint8": (_gguf_bytes, ["'blob'", "claims 1,073,741,824 items"]),
    "GGUF array of 100 M empty arrays": (_gguf_empty_arrays, ["'nested'", "claims 100,000,000 items"]),
    "TF string tensor of 10**9 empty strings": (_tf_empty_strings, ["'vocab'", "claims 1,000,000,000 items"]),
}


def _assert_bounded(outcome: Outcome, case: str) -> None:
    assert outcome.peak_rss_mb is not None and outcome.peak_rss_mb < PEAK_MB, (case, outcome.peak_rss_mb)
    assert outcome.tmp_left == [], (case, outcome.tmp_left)


@pytest.mark.parametrize("case", sorted(COUNT_CASES))
def test_python_objects_from_a_file_are_bounded_by_count(tmp_path: Path, case: str) -> None:
    build, words = COUNT_CASES[case]
    folder = tmp_path / "area"
    folder.mkdir()
    path = build(folder)
    before = tree_state(tmp_path)
    for command in (["ls", str(path)], ["convert", str(path), str(tmp_path / "out.h5")]):
        outcome = run_hostile("cli", command, timeout_s=120)
        assert outcome.status == "exit2" and outcome.stderr.count("\n") == 1, (case, outcome)
        for word in [*words, str(path.name), ENV_MAX_OBJECTS, f"at most {MAX_OBJECTS:,} Python objects"]:
            assert word in outcome.stderr, (case, word, outcome.stderr)
        _assert_bounded(outcome, case)
    assert changed_paths(before, tree_state(tmp_path)) == [] and not (tmp_path / "out.h5").exists()


def test_the_count_cap_reads_up_to_it_and_is_raised_by_the_environment(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = b"".join(_string(b"t%d" % i) for i in range(1000))
    kvs = (_string(b"tokens") + struct.pack("<IIQ", 9, 8, 1000) + tokens
           + _string(b"scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<3f", 0.5, 1.5, -2.0))
    path = _gguf(tmp_path / "vocab.gguf", kvs, 2)
    monkeypatch.setenv(ENV_MAX_OBJECTS, "1002")  # the budget is per file: 1000 tokens + 3 scores
    with pytest.raises(ValueTooLargeError, match=r"vocab\.gguf'?: the value of key 'scores' claims 3 items after "
                                                 r"1,000 built for earlier values .* VARSTORE_MAX_OBJECTS"):
        GGUFReader(path)
    monkeypatch.setenv(ENV_MAX_OBJECTS, "1003")
    kv = GGUFReader(path).metadata["gguf"]
    assert kv["tokens"][:2] == ["t0", "t1"] and len(kv["tokens"]) == 1000 and kv["scores"] == [0.5, 1.5, -2.0]


def _tf_strings(prefix: Path, elements: list[bytes]) -> Path:
    from tests.convert.tf_bundle_writer import BundleWriter

    writer = BundleWriter(prefix)
    writer.add("vocab", elements)
    return writer.finish()


def test_a_tf_string_tensor_under_the_cap_reads_and_over_it_is_refused(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _tf_strings(tmp_path / "model.ckpt", [b"", b"ab", b"x" * 300, b""])
    reader = TFCheckpointReader(tmp_path / "model.ckpt")
    assert reader.info("vocab").dtype == "S300"  # the longest, from the lengths alone
    assert reader.read("vocab").tolist() == [b"", b"ab", b"x" * 300, b""]
    reader.close()
    monkeypatch.setenv(ENV_MAX_OBJECTS, "3")
    reader = TFCheckpointReader(tmp_path / "model.ckpt")
    with pytest.raises(ValueTooLargeError, match=r"model\.ckpt.*string variable 'vocab' claims 4 items \(\d+ bytes "
                                                 r"stored for them\); at most 3 Python objects"):
        reader.info("vocab")
    reader.close()


# ------------------------------------------------------------------ HDF5 attributes over the cap
def _big_attribute(folder: Path) -> Path:
    path = folder / "attrs.h5"
    with h5py.File(path, "w", libver="latest") as out:  # dense attribute storage holds 96 MiB
        out.attrs["big"] = np.zeros(48 << 20, np.float16)  # 2.4 GiB as Python floats
        out.attrs["small"] = np.arange(3, dtype=np.int32)
        out["w"] = np.full(3, 1.5, np.float32)
        out["w"].attrs["huge"] = np.zeros(1 << 20, np.float32)
    return path


def test_an_hdf5_attribute_over_the_cap_is_listed_not_loaded(tmp_path: Path) -> None:
    folder = tmp_path / "area"
    folder.mkdir()
    path = _big_attribute(folder)
    before = tree_state(tmp_path)
    listed = run_hostile("cli", ["ls", "--json", str(path)], timeout_s=120)
    assert listed.status == "exit0", listed
    document = json.loads(listed.stdout)
    assert document["metadata"] == {
        "big": "<attribute 'big': float16 (50331648,) not loaded, over the cap of 65,536 bytes>", "small": [0, 1, 2]}
    _assert_bounded(listed, "hdf5 attribute")
    with open_checkpoint(path) as reader:  # a dataset's attributes too
        assert reader.info("w").attributes == {
            "huge": "<attribute 'huge': float32 (1048576,) not loaded, over the cap of 65,536 bytes>"}
        assert reader.read("w").tolist() == [1.5] * 3
    converted = run_hostile("cli", ["convert", str(path), str(tmp_path / "out.safetensors")], timeout_s=120)
    assert converted.status == "exit0", converted
    _assert_bounded(converted, "hdf5 attribute")
    assert changed_paths(before, tree_state(tmp_path)) == ["out.safetensors"]


# ------------------------------------------------------------------ .keras deflated member
def _keras_bomb(folder: Path) -> Path:
    """A ~1 MB .keras whose deflated weights member inflates to 1 GiB of zeros (declared truthfully)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = bytes(1 << 20)
    data = b"".join(squeeze.compress(block) for _ in range(1024)) + squeeze.flush()
    crc = 0
    for _ in range(1024):
        crc = zlib.crc32(block, crc)
    return _zip_with_raw_member(folder / "model.keras", [("model.weights.h5", zipfile.ZIP_DEFLATED, data, 1 << 30,
                                                          crc)])


def test_a_keras_member_is_not_inflated_into_tmpdir_past_the_expansion_factor(tmp_path: Path) -> None:
    folder = tmp_path / "area"
    folder.mkdir()
    path = _keras_bomb(folder)
    assert path.stat().st_size < 1_100_000
    before = tree_state(tmp_path)
    for command in (["ls", str(path)], ["convert", str(path), str(tmp_path / "out.h5")]):
        outcome = run_hostile("cli", command, timeout_s=120)
        assert outcome.status == "exit2" and outcome.stderr.count("\n") == 1, outcome
        for word in ("'model.weights.h5'", "model.keras", "declares 1,073,741,824 bytes", "VARSTORE_MAX_EXPANSION"):
            assert word in outcome.stderr, (word, outcome.stderr)
        _assert_bounded(outcome, "keras")  # nothing left in TMPDIR, and nothing was written there
    assert changed_paths(before, tree_state(tmp_path)) == []


# ------------------------------------------------------------------ GGUF alignment
def test_a_gguf_alignment_of_2_to_the_28_is_refused_on_read_and_on_write(tmp_path: Path) -> None:
    folder = tmp_path / "area"
    folder.mkdir()
    path = _gguf(folder / "align.gguf", _string(b"general.alignment") + struct.pack("<II", 4, 1 << 28), 1)
    before = tree_state(tmp_path)
    for command in (["ls", str(path)], ["convert", str(path), str(tmp_path / "out.gguf")]):
        outcome = run_hostile("cli", command, timeout_s=120)
        assert outcome.status == "exit2" and outcome.stderr.count("\n") == 1, outcome
        assert "align.gguf" in outcome.stderr and "general.alignment 268,435,456" in outcome.stderr, outcome.stderr
        _assert_bounded(outcome, "alignment")
    assert changed_paths(before, tree_state(tmp_path)) == []
    with pytest.raises(CorruptCheckpointError, match="larger than any GGUF writer uses"):
        GGUFReader(path)
    from varstore.checkpoint.format.entry import SaveEntry

    entry = SaveEntry("w", (3,), np.dtype(np.float32), lambda: np.full(3, 2.5, np.float32))
    with pytest.raises(ConversionError, match=r"general\.alignment 268435456 is not a power of two of at most "
                                              r"65,536 bytes"):
        write_gguf(tmp_path / "bad.gguf", [entry], key_values={"general.alignment": 1 << 28})
    assert not (tmp_path / "bad.gguf").exists()


def test_gguf_padding_is_written_as_bytes_at_the_largest_alignment(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = pytest.importorskip("gguf")
    from varstore.checkpoint.format.entry import SaveEntry

    def no_list_padding(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("gguf's own write_padding (bytes([0] * n)) was called")

    monkeypatch.setattr(gguf.GGUFWriter, "write_padding", no_list_padding)
    entries = [SaveEntry(n, (3,), np.dtype(np.float32), lambda n=n: np.full(3, len(n), np.float32))
               for n in ("a", "bb")]
    path = tmp_path / "aligned.gguf"
    write_gguf(path, entries, key_values={"general.alignment": MAX_ALIGNMENT, "general.name": "t"})
    reader = GGUFReader(path)
    assert reader.metadata["gguf"]["general.alignment"] == MAX_ALIGNMENT
    assert reader.read("a").tolist() == [1.0] * 3 and reader.read("bb").tolist() == [2.0] * 3
    assert reader._data_start % MAX_ALIGNMENT == 0 and path.stat().st_size == reader._data_start + 2 * MAX_ALIGNMENT
    reader.close()


# ------------------------------------------------------------------ time bombs
def _safetensors(path: Path, names: list[str]) -> Path:
    header = {name: {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i, name in enumerate(names)}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(len(names)))
    return path


class _Counted:
    """Counts the names difflib compares (get_close_matches' possibilities and SequenceMatcher pairs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.compared = 0
        close, matcher = difflib.get_close_matches, difflib.SequenceMatcher

        def get_close_matches(word: str, possibilities: Any, *args: Any, **kwargs: Any) -> list[str]:
            possibilities = list(possibilities)
            self.compared += len(possibilities)
            return close(word, possibilities, *args, **kwargs)

        def sequence_matcher(*args: Any, **kwargs: Any) -> Any:
            self.compared += 1
            return matcher(*args, **kwargs)

        monkeypatch.setattr(difflib, "get_close_matches", get_close_matches)
        monkeypatch.setattr(difflib, "SequenceMatcher", sequence_matcher)


_STORED = [f"model/layer_{i}/block_{i % 7}/kernel" for i in range(60_000)]


def test_restore_hints_over_60000_names_compare_a_bounded_number_of_names(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = [f"model/layer_{i}/block_{i % 7}/kernal" for i in range(0, 60_000, 2_000)]  # 30 typos
    counted = _Counted(monkeypatch)
    text = name_hints.missing_with_hints(missing, _STORED)
    for i in range(0, 40_000, 2_000):  # the first twenty are listed, each with its right name first
        assert f"'model/layer_{i}/block_{i % 7}/kernal' (did you mean 'model/layer_{i}/block_{i % 7}/kernel'" in text
    assert text.endswith(", and 10 more]")
    # all pairs would be 20 x 60,000 x 2 (whole names, then same last component); each name sees < 2,000
    assert counted.compared < 20 * 2_000, counted.compared
    assert name_hints.suggestions("model.layer_5.block_5.kernel", _STORED)[0] == "model/layer_5/block_5/kernel"


def _suggestions_before(name: str, candidates: list[str]) -> list[str]:
    """name_hints.suggestions as it was before issue 36 (every stored name compared), the reference."""
    last_of = name_hints._last
    found: list[str] = []
    for swapped in (name.replace("/", "."), name.replace(".", "/")):
        if swapped != name and swapped in set(candidates) and swapped not in found:
            found.append(swapped)
    found += [c for c in difflib.get_close_matches(name, candidates, n=3, cutoff=0.75) if c not in found]
    if len(found) < 3:
        close_last = set(difflib.get_close_matches(last_of(name), sorted({last_of(c) for c in candidates}), n=5,
                                                   cutoff=0.8))
        same_tail = [c for c in candidates if last_of(c) in close_last and c not in found]
        same_tail.sort(key=lambda c: -difflib.SequenceMatcher(None, name, c).ratio())
        found += same_tail
    return found[:3]


@pytest.mark.parametrize("name", ["model/layer_12/block_5/kernal", "model.layer_3.block_3.kernel", "zzz",
                                  "model/layer_1999/block_4/kern", "other/layer_7/block_0/kernel"])
def test_restore_hints_up_to_2000_names_are_the_same_as_before(name: str) -> None:
    stored = _STORED[:name_hints.SMALL]
    assert name_hints.suggestions(name, stored) == _suggestions_before(name, stored)


def test_show_hints_over_60000_names_in_a_child(tmp_path: Path) -> None:
    path = _safetensors(tmp_path / "many.safetensors", _STORED)
    before = tree_state(tmp_path)
    outcome = run_hostile("cli", ["show", str(path), "model/layer_3000/block_4/kernal"], timeout_s=300)
    assert outcome.status == "exit2" and outcome.stderr.count("\n") == 1, outcome
    assert "no variable 'model/layer_3000/block_4/kernal'" in outcome.stderr
    assert "did you mean 'model/layer_3000/block_4/kernel'" in outcome.stderr
    _assert_bounded(outcome, "show hint")
    assert changed_paths(before, tree_state(tmp_path)) == []


def test_ls_tree_over_a_deep_scope_chain_is_linear(tmp_path: Path) -> None:
    deep = "/".join(f"s{i}" for i in range(20_000))  # 20,000 levels, 128 KB
    names = [deep, *(f"flat/v{i}" for i in range(2_000))]
    path = _safetensors(tmp_path / "deep.safetensors", names)
    before = tree_state(tmp_path)
    tree = run_hostile("cli", ["ls", "--tree", str(path)], timeout_s=300)
    assert tree.status == "exit0", tree
    lines = tree.stdout.splitlines()
    assert len(lines) == 2 + 1 + 2_000 + 32 + 1, len(lines)  # header, root, flat/ and its 2,000, 32 levels, total
    assert "s31/s32/s33" in tree.stdout and "s19999" in tree.stdout  # deeper levels joined in one node, kept
    assert len(tree.stdout) < 2 * len(deep) + 2_000 * 120, len(tree.stdout)  # was 20,000 lines x 80 KB
    flat = run_hostile("cli", ["ls", str(path)], timeout_s=300)
    assert flat.status == "exit0", flat
    assert len(flat.stdout) < 2 * len(deep) + 2_000 * 300, len(flat.stdout)  # the long name pads no other row
    as_json = run_hostile("cli", ["ls", "--tree", "--json", str(path)], timeout_s=300)
    assert as_json.status == "exit0", as_json  # 32 levels: no RecursionError
    for outcome in (tree, flat, as_json):
        _assert_bounded(outcome, "tree")
    assert changed_paths(before, tree_state(tmp_path)) == []
