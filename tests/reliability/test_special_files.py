"""A FIFO, socket or symlink loop where a checkpoint file or chunk should be: refused, never opened (issue 26, item 4).

Each operation runs in a child process under a timeout (tests/reliability/
_hostile_run.py): a hang is a failure, and the child is killed. The API must
raise SpecialFileError naming the path; the CLI must exit 2 with that message.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from varstore import CheckpointManager, save
from varstore.errors import SpecialFileError

from ._hostile_run import run_hostile

TIMEOUT_S = 60.0


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _loop(path: Path) -> None:
    os.symlink(path.name, path)  # points at itself


@pytest.fixture
def bound_sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


def _makers(held: list[socket.socket]) -> dict[str, Callable[[Path], None]]:
    def _socket(path: Path) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        held.append(sock)

    return {"FIFO (named pipe)": _fifo, "socket": _socket, "symlink loop": _loop}


KINDS = ["FIFO (named pipe)", "socket", "symlink loop"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("action", ["read_all", "ls", "verify"])
def test_the_api_refuses_a_special_file_in_place_of_a_checkpoint(tmp_path: Path, bound_sockets: list[socket.socket],
                                                                 kind: str, action: str) -> None:
    path = tmp_path / "model.h5"
    _makers(bound_sockets)[kind](path)
    outcome = run_hostile("api", [action, str(path)], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.error) == ("typed", "SpecialFileError"), outcome
    assert f"'{path}'" in outcome.message and kind in outcome.message


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", [["ls"], ["show", "{path}", "w"], ["verify"]])
def test_the_cli_refuses_a_special_file_in_place_of_a_checkpoint(tmp_path: Path, bound_sockets: list[socket.socket],
                                                                 kind: str, command: list[str]) -> None:
    path = tmp_path / "model.h5"
    _makers(bound_sockets)[kind](path)
    args = [part.format(path=path) for part in command] if len(command) > 1 else [command[0], str(path)]
    outcome = run_hostile("cli", args, timeout_s=TIMEOUT_S)
    assert outcome.status == "exit2", outcome
    assert str(path) in outcome.stderr and kind in outcome.stderr


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunk", ["variable", "manifest"])
def test_a_special_file_in_place_of_a_zarr_chunk_is_refused(tmp_path: Path, bound_sockets: list[socket.socket],
                                                            kind: str, chunk: str) -> None:
    path = tmp_path / "model.zarr"
    save(path, {"w": np.arange(6.0)}, pack_threshold_bytes=0)
    target = path / "w" / "0" if chunk == "variable" else path / "_varstore" / "manifest" / "0"
    assert target.is_file()
    target.unlink()
    _makers(bound_sockets)[kind](target)
    for action in ("read_all", "verify"):
        outcome = run_hostile("api", [action, str(path)], timeout_s=TIMEOUT_S)
        assert (outcome.status, outcome.error) == ("typed", "SpecialFileError"), outcome
        assert f"'{target}'" in outcome.message and kind in outcome.message
    outcome = run_hostile("cli", ["show", str(path), "w"], timeout_s=TIMEOUT_S)
    assert outcome.status == "exit2" and str(target) in outcome.stderr, outcome


@pytest.mark.parametrize("kind", KINDS)
def test_restore_latest_skips_a_special_file_and_restores_the_real_checkpoint(
        tmp_path: Path, bound_sockets: list[socket.socket], kind: str) -> None:
    directory = tmp_path / "run"
    CheckpointManager(directory).save({"w": np.arange(4.0)}, step=1)
    _makers(bound_sockets)[kind](directory / "ckpt-2.h5")  # the highest step: tried first
    outcome = run_hostile("api", ["restore_latest", str(directory)], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.result) == ("ok", []), outcome  # found one (None: none usable); no hang
    target = {"w": np.zeros(4)}
    result = CheckpointManager(directory).restore_latest(target)  # safe in-process now: it did not hang
    assert result is not None and result.restored == ["w"]
    np.testing.assert_array_equal(target["w"], np.arange(4.0))
    assert CheckpointManager(directory).checkpoints == [directory / "ckpt-1.h5"]  # the special entry is none
    listing = run_hostile("cli", ["ls", str(directory), "--checkpoints"], timeout_s=TIMEOUT_S)
    assert listing.status == "exit0", listing
    assert "ckpt-1.h5" in listing.stdout and "ckpt-2.h5" not in listing.stdout
    latest = run_hostile("cli", ["ls", str(directory)], timeout_s=TIMEOUT_S)
    assert latest.status == "exit0" and "ckpt-1.h5" in latest.stdout, latest


def test_a_special_file_as_the_manager_pointer_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    CheckpointManager(directory).save({"w": np.arange(4.0)}, step=1)
    (directory / "latest").unlink()
    os.mkfifo(directory / "latest")
    outcome = run_hostile("api", ["manager_save", str(directory), "2", "2"], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.error) == ("typed", "SpecialFileError"), outcome
    assert "latest" in outcome.message and "FIFO" in outcome.message


def test_a_stray_symlink_loop_no_read_touches_is_left_alone_and_the_walker_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, {"w": np.arange(6.0)}, pack_threshold_bytes=0)
    (path / "w" / "loop").symlink_to("loop")  # not a chunk: varstore's reader never opens it
    outcome = run_hostile("api", ["read_all", str(path)], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.result) == ("ok", ["w"]), outcome
    from varstore.backends.zarr3.walker import ZarrWalker  # foreign Zarr: zarr itself may open any file

    with pytest.raises(SpecialFileError, match=r"w/loop' \(in Zarr directory .*\) is a symlink loop"):
        ZarrWalker(path)
