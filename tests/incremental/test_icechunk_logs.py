"""How varstore imports icechunk (storage/icechunk_repo._icechunk): without Icechunk's tracing subscriber,
whose error layer formats every call's arguments (an inline chunk byte by byte), unless the user asked for
logs; the user's environment is left as it was. Each case runs in a fresh interpreter, because the
subscriber is installed once per process at icechunk's import.

What is observable of the subscriber: an Icechunk error names the spans it passed through ("context:
0: icechunk::refs::fetch_tag ...") only when the subscriber records them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")

_PROBE = """
import json, os, sys
first = sys.argv[1]
if first == "icechunk":
    import icechunk
from varstore.storage import icechunk_repo
ic = icechunk_repo._icechunk()
repo = ic.Repository.create(ic.local_filesystem_storage(sys.argv[2]))
try:
    repo.lookup_tag("no-such-tag")
except Exception as err:
    message = str(err)
print(json.dumps({"spans": "icechunk::refs::fetch_tag" in message, "not found": "no-such-tag" in message,
                  "no_logs_left": os.environ.get("ICECHUNK_NO_LOGS")}))
"""


def _probe(tmp_path: Path, first: str, **env: str) -> dict[str, object]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("ICECHUNK_")}
    environ.update(env)
    done = subprocess.run([sys.executable, "-c", _PROBE, first, str(tmp_path / "repo")], env=environ,
                          capture_output=True, text=True, timeout=120, check=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout + done.stderr
    result: dict[str, object] = json.loads(lines[-1])
    # Icechunk warns on stdout on every local open while its subscriber logs warnings
    result["warned"] = "not safe for concurrent commits" in done.stdout
    return result


def test_varstore_imports_icechunk_without_its_span_recording(tmp_path: Path) -> None:
    result = _probe(tmp_path, "varstore")
    assert result == {"spans": False, "not found": True, "no_logs_left": None, "warned": False}


def test_a_user_who_asks_for_icechunk_logs_gets_them(tmp_path: Path) -> None:
    result = _probe(tmp_path, "varstore", ICECHUNK_LOG="icechunk=warn")
    assert result["spans"] is True and result["warned"] is True
    assert result["no_logs_left"] is None


def test_a_user_who_set_icechunk_no_logs_keeps_it(tmp_path: Path) -> None:
    result = _probe(tmp_path, "varstore", ICECHUNK_NO_LOGS="1")
    assert result == {"spans": False, "not found": True, "no_logs_left": "1", "warned": False}


def test_icechunk_imported_first_keeps_its_subscriber_with_warnings_silenced(tmp_path: Path) -> None:
    result = _probe(tmp_path, "icechunk")
    assert result == {"spans": True, "not found": True, "no_logs_left": None, "warned": False}
