"""CheckpointReader.held (reader_api.py): a restore that owns its reader asks its names once and closes it once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.read.reader import open_varstore
from varstore.checkpoint.read.restoration import restore_and_release


def test_held_lends_the_names_and_closes_unless_kept(tmp_path: Path) -> None:
    path = vs.save(tmp_path / "m.h5", {"a": np.arange(3, dtype=np.float32), "b": np.ones(2, np.int64)})
    reader = open_varstore(path)
    with reader.held() as hold:
        assert hold.names == ["a", "b"] and hold.keep is False
    assert reader._closed  # noqa: SLF001 - closed on exit
    reader = open_varstore(path)
    with reader.held() as hold:
        hold.keep = True
    assert not reader._closed and reader.read("a").tolist() == [0.0, 1.0, 2.0]  # noqa: SLF001
    reader.close()
    reader = open_varstore(path)
    with pytest.raises(RuntimeError), reader.held():
        raise RuntimeError("the restore failed")
    assert reader._closed  # noqa: SLF001 - closed on any error


def test_restore_and_release_closes_an_eager_restore_and_keeps_a_deferred_one(tmp_path: Path) -> None:
    from varstore.store.scopes import VariableStore

    path = vs.save(tmp_path / "m.h5", {"a": np.arange(3, dtype=np.float32), "late": np.ones(2, np.float32)})
    target = {"a": np.zeros(3, np.float32)}
    reader = open_varstore(path)
    result = restore_and_release(reader, target, strict=False)
    assert reader._closed and target["a"].tolist() == [0.0, 1.0, 2.0] and result.unexpected == ["late"]  # noqa: SLF001
    store = VariableStore()
    store.get_variable("a", shape=(3,), dtype=np.float32, initializer=np.zeros)
    reader = open_varstore(path)
    result = restore_and_release(reader, store, strict=False)
    assert result.deferred == ["late"] and not reader._closed  # noqa: SLF001 - "late" still reads from it
    assert store.get_variable("late", shape=(2,), dtype=np.float32).numpy().tolist() == [1.0, 1.0]
