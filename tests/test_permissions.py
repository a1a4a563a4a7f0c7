"""Refused access and special files are what they are: CheckpointPermissionError / SpecialFileError naming the path.

Root reads a chmod-000 file anyway (CAP_DAC_OVERRIDE), so each case runs in a
child process that first drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from
its capability bounding set (prctl PR_CAPBSET_DROP) before it execs Python: it
stays uid 0, so the interpreter under /root and the repository still open,
but a file or folder whose mode denies the owner is denied. A non-root user
needs no dropping. The children report each error's class and message as JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.formats.probe import Probe
from varstore.formats.registry import detect
from varstore.errors import NotACheckpointError, SpecialFileError, VarstoreError

ROOT = Path(__file__).resolve().parents[1]
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _drop_file_capabilities() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def _env() -> dict[str, str]:
    paths = [str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p), VARSTORE_DEBUG="0")


def _unprivileged(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    preexec = _drop_file_capabilities if os.geteuid() == 0 else None
    try:
        return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), preexec_fn=preexec,
                              capture_output=True, text=True, timeout=300)
    except subprocess.SubprocessError as err:  # prctl refused (no CAP_SETPCAP): cannot make a denial
        pytest.skip(f"cannot drop file capabilities here: {err}")


def _require_denied(path: Path, cwd: Path, flags: str = "os.O_RDONLY") -> None:
    probe = _unprivileged(["-c", f"import os; os.close(os.open({str(path)!r}, {flags}))"], cwd)
    if probe.returncode == 0:
        pytest.skip(f"a child process could still open {path} ({flags}) despite its mode")


_CALLS = """
import json, sys, numpy as np, varstore as vs
results = {}
def attempt(label, call):
    try:
        call()
        results[label] = ["ok", ""]
    except BaseException as err:
        results[label] = [type(err).__name__ + (" PermissionError" if isinstance(err, PermissionError) else ""),
                          str(err)]
"""


def _run_calls(tmp_path: Path, body: str) -> dict[str, list[str]]:
    code = _CALLS + textwrap.dedent(body) + "\nprint(json.dumps(results))\n"
    result = _unprivileged(["-c", code], tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture
def secrets(tmp_path: Path, fixtures_dir: Path) -> Path:
    """tmp_path holding secret.h5, secret.zarr (a chmod 000 folder) and secret.safetensors, all chmod 000."""
    vs.save(tmp_path / "secret.h5", {"w": np.arange(3.0)})
    vs.save(tmp_path / "secret.zarr", {"w": np.arange(3.0)})
    shutil.copy(fixtures_dir / "safetensors" / "mixed_numpy.safetensors", tmp_path / "secret.safetensors")
    for name in ("secret.h5", "secret.zarr", "secret.safetensors"):
        (tmp_path / name).chmod(0)
    yield tmp_path
    (tmp_path / "secret.zarr").chmod(0o755)  # so pytest can remove it


@pytest.mark.parametrize("name", ["secret.h5", "secret.zarr", "secret.safetensors"])
def test_every_reader_names_an_unreadable_path(secrets: Path, name: str) -> None:
    _require_denied(secrets / name, secrets)
    results = _run_calls(secrets, f"""
        path = {name!r}
        attempt("load", lambda: vs.load(path))
        attempt("open_checkpoint", lambda: vs.open_checkpoint(path))
        attempt("detect_format", lambda: vs.detect_format(path))
        attempt("restore", lambda: vs.restore(path, {{"w": np.zeros(3)}}))
        attempt("convert", lambda: vs.convert(path, "out.zarr"))
    """)
    expected = ["CheckpointPermissionError PermissionError", f"cannot read '{name}': permission denied"]
    assert results == {label: expected for label in ("load", "open_checkpoint", "detect_format", "restore",
                                                     "convert")}


def test_saving_into_a_read_only_folder_names_the_folder(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    _require_denied(tmp_path / "ro" / "probe", tmp_path, "os.O_WRONLY | os.O_CREAT")
    results = _run_calls(tmp_path, """
        arrays = {"w": np.arange(3.0)}
        attempt("save h5", lambda: vs.save("ro/x.h5", arrays))
        attempt("save zarr", lambda: vs.save("ro/x.zarr", arrays))
        vs.save("src.h5", arrays)
        attempt("convert", lambda: vs.convert("src.h5", "ro/x.safetensors"))
        attempt("manager", lambda: vs.CheckpointManager("ro/runs").save(arrays, 1))
    """)
    denied = "CheckpointPermissionError PermissionError"
    assert results == {
        "save h5": [denied, "cannot write into 'ro': permission denied"],
        "save zarr": [denied, "cannot write into 'ro': permission denied"],
        "convert": [denied, "cannot write into 'ro': permission denied"],
        "manager": [denied, "cannot write into 'ro/runs': permission denied"],
    }
    assert sorted(os.listdir(tmp_path / "ro")) == []


def test_an_unreadable_chunk_inside_a_zarr_checkpoint_is_named(tmp_path: Path) -> None:
    vs.save(tmp_path / "ok.zarr", {"w": np.arange(3.0), "b": np.ones(2)})
    chunks = sorted(p for p in (tmp_path / "ok.zarr").rglob("*") if p.is_file() and p.name != "zarr.json")
    assert chunks, "the Zarr checkpoint wrote no chunk files"
    for chunk in chunks:
        chunk.chmod(0)
    _require_denied(chunks[0], tmp_path)
    results = _run_calls(tmp_path, """
        attempt("load", lambda: vs.load("ok.zarr"))
    """)
    kind, message = results["load"]
    assert kind == "CheckpointPermissionError PermissionError"
    assert message.startswith("cannot read 'ok.zarr/") and message.endswith("': permission denied"), message


@pytest.mark.parametrize("command", [["ls", "secret.h5"], ["show", "secret.h5", "w"], ["verify", "secret.h5"],
                                     ["diff", "secret.h5", "secret.h5"], ["convert", "secret.h5", "out.zarr"],
                                     ["ls", "secret.zarr"]])
def test_cli_says_which_path_it_cannot_read(secrets: Path, command: list[str]) -> None:
    _require_denied(secrets / "secret.h5", secrets)
    result = _unprivileged(["-m", "varstore_cli.main", *command], secrets)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"varstore: error: cannot read '{command[1]}': permission denied\n"
    assert not (secrets / "out.zarr").exists()


def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    code = ("import varstore as vs\ntry:\n    vs.open_checkpoint('model.safetensors')\n"
            "except vs.SpecialFileError as err:\n    print(err)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True,
                            text=True, timeout=120)  # the timeout only stops a reader that blocked on the FIFO
    assert result.stdout == ("'model.safetensors' (file to import) is a FIFO (named pipe), not a regular file or "
                             "directory: varstore never opens one for reading (it could block forever or read a "
                             "device); replace it with the real file\n"), result.stderr
    with pytest.raises(SpecialFileError, match="FIFO"):
        Probe(fifo)


@pytest.mark.parametrize("size", list(range(1, 17)) + [511, 513])
def test_sniffing_a_short_file_says_not_a_checkpoint(tmp_path: Path, fixtures_dir: Path, size: int) -> None:
    sources = [fixtures_dir / "safetensors" / "mixed_numpy.safetensors", fixtures_dir / "gguf" / "mini.gguf",
               fixtures_dir / "torch_zip" / "optimizer.pt", fixtures_dir / "keras3" / "model.weights.h5",
               fixtures_dir / "npz" / "arrays.npz", fixtures_dir / "tf1_scopes" / "model.ckpt.index"]
    for source in sources:
        short = tmp_path / f"short{size}{source.suffix}"
        short.write_bytes(source.read_bytes()[:size])
        try:
            vs.open_checkpoint(short).close()
        except VarstoreError:
            pass  # typed: NotACheckpointError, CorruptCheckpointError, UnsafeFormatError ...


def test_a_head_shorter_than_the_file_is_not_a_safetensors_file(tmp_path: Path) -> None:
    path = tmp_path / "grown.dat"
    path.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    with Probe(path) as probe:
        probe.head = b"\x02\x00"  # the file grew (or shrank) between the stat and the read
        with pytest.raises(NotACheckpointError, match="grown.dat"):
            detect(probe)


def test_an_unreadable_zarr_json_is_a_permission_error_api_and_cli(tmp_path: Path) -> None:
    vs.save(tmp_path / "m.zarr", {"w": np.arange(3.0)})
    vs.save(tmp_path / "plain.zarr", {"w": np.arange(3.0)})  # the same, for a foreign-style open
    (tmp_path / "m.zarr" / "zarr.json").chmod(0)
    _require_denied(tmp_path / "m.zarr" / "zarr.json", tmp_path)
    results = _run_calls(tmp_path, """
        attempt("open_checkpoint", lambda: vs.open_checkpoint("m.zarr"))
        attempt("load", lambda: vs.load("m.zarr"))
        attempt("restore", lambda: vs.restore("m.zarr", {"w": np.zeros(3)}))
        attempt("convert", lambda: vs.convert("m.zarr", "out.h5"))
        attempt("open as zarr", lambda: vs.open_checkpoint("m.zarr", format="zarr"))
    """)
    expected = ["CheckpointPermissionError PermissionError", "cannot read 'm.zarr/zarr.json': permission denied"]
    assert results == {label: expected for label in ("open_checkpoint", "load", "restore", "convert",
                                                     "open as zarr")}
    result = _unprivileged(["-m", "varstore_cli", "ls", "m.zarr"], tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "varstore: error: cannot read 'm.zarr/zarr.json': permission denied\n"
    (tmp_path / "m.zarr" / "zarr.json").chmod(0o644)
