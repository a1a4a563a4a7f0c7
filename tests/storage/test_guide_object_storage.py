"""docs/guide/object-storage.md runs as written against the moto server and prints what it shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests._s3server import S3TestServer, s3_environment
from tests.core.test_guide import guide_blocks

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "object-storage.md"
_MARKER = "@@varstore-guide-block@@"
_SHOWN_PREFIX = re.compile(r"guide-[0-9a-f]{6}")  # the guide shows one run's fresh prefix: guide-1a2b3c


def test_object_storage_guide_runs_and_prints_what_it_shows(s3_server: S3TestServer, tmp_path: Path) -> None:
    blocks = guide_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    script = tmp_path / "guide.py"
    script.write_text("\n".join(f"print({_MARKER!r})\n{code}" for code, _ in blocks), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "AZURE_"))}
    env.update(s3_environment(s3_server))
    assert s3_server.bucket == "varstore-test"  # the guide's URLs name it
    prefixes = []
    for _run in range(2):  # a second run against the same bucket: each writes under a fresh prefix
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert done.returncode == 0, f"the guide's code failed:\n{done.stderr}"
        prefixes += re.findall(r"varstore-test/(guide-[0-9a-f]{6})", done.stdout)[:1]
        outputs = _SHOWN_PREFIX.sub("guide-1a2b3c", done.stdout).split(_MARKER + "\n")[1:]
        assert len(outputs) == len(blocks)
        for (code, expected), output in zip(blocks, outputs):
            assert output == expected, f"block\n{code}\nprinted\n{output}\nexpected\n{expected}"
    assert len(set(prefixes)) == 2, prefixes
