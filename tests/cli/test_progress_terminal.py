"""The progress bar in a real process: drawn on a terminal stderr, absent when stderr is a pipe or with --json."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pty = pytest.importorskip("pty")  # POSIX only
fcntl = pytest.importorskip("fcntl")
termios = pytest.importorskip("termios")


def _convert(args: list[str], stderr_is_terminal: bool) -> tuple[int, str, str]:
    command = [sys.executable, "-m", "varstore_cli", "convert", *args]
    if not stderr_is_terminal:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr
    import struct

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: every writer of the terminal has exited
            break
        if not data:
            break
        chunks.append(data)
    stdout, _ = process.communicate(timeout=120)
    os.close(master)
    return process.returncode, stdout, b"".join(chunks).decode("utf-8", "replace")


def test_bar_on_a_terminal(fixtures_dir: Path, tmp_path: Path):
    code, stdout, stderr = _convert([str(fixtures_dir / "tf1_scopes" / "model.ckpt"), str(tmp_path / "a.h5")],
                                    stderr_is_terminal=True)
    assert code == 0, stderr
    assert "%|" in stderr and "B/s" in stderr  # tqdm's bar, in bytes
    assert stdout.startswith("converted ") and "%|" not in stdout


def test_no_bar_when_stderr_is_a_pipe(fixtures_dir: Path, tmp_path: Path):
    code, stdout, stderr = _convert([str(fixtures_dir / "tf1_scopes" / "model.ckpt"), str(tmp_path / "b.h5")],
                                    stderr_is_terminal=False)
    assert code == 0 and stderr == "" and stdout.startswith("converted ")


def test_no_bar_with_json_even_on_a_terminal(fixtures_dir: Path, tmp_path: Path):
    code, stdout, stderr = _convert(["--json", str(fixtures_dir / "tf1_scopes" / "model.ckpt"),
                                     str(tmp_path / "c.h5")], stderr_is_terminal=True)
    assert code == 0 and stderr == "" and '"schema": "varstore.convert/1"' in stdout
