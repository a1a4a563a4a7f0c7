"""Ctrl-C at any moment of a CLI run, start-up included, ends with "varstore: interrupted" and exit 130, never a
traceback (issue 38, item 4): cli/varstore_cli/entry.py handles SIGINT before the heavy imports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import varstore as vs

ROOT = Path(__file__).resolve().parents[2]


def test_sigint_at_any_moment_prints_no_traceback(tmp_path: Path) -> None:
    source = tmp_path / "m.h5"
    vs.save(source, {f"layer{i}/w": np.full((64, 64), i, np.float32) for i in range(50)})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")]))
    outcomes = []
    for delay_s in (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2):
        destination = tmp_path / f"out-{delay_s}.safetensors"
        child = subprocess.Popen([sys.executable, "-m", "varstore_cli", "convert", str(source), str(destination)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
        time.sleep(delay_s)
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate()
        err = stderr.decode()
        ours = (str(ROOT / "varstore") + os.sep, str(ROOT / "cli") + os.sep)  # not the venv, which may live in ROOT
        if "Traceback" in err and not any(part in err for part in ours):  # Python's own start-up (site, .pth
            outcomes.append("python start-up")  # files, runpy) before any varstore code ran: `python -c pass` too
            continue
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay_s, err)  # none from varstore's code
        if child.returncode == 130:
            assert err.endswith("varstore: interrupted\n"), (delay_s, err)
        elif child.returncode == -signal.SIGINT:  # before the interpreter installed any handler: killed silently
            assert stdout == b"", (delay_s, err)
        else:  # done before the signal came
            assert child.returncode == 0 and stdout.decode().startswith("converted "), (delay_s, err)
        outcomes.append(child.returncode)
    assert 130 in outcomes  # at least one delay lands inside the run


def test_the_console_script_starts_in_the_entry_module() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'varstore = "varstore_cli.entry:main"' in text  # the module that handles SIGINT before importing
    done = subprocess.run([sys.executable, "-c", "from varstore_cli.entry import main; main(['--version'])"],
                          capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "cli")])))
    assert done.returncode == 0 and done.stdout.startswith("varstore, version "), done.stderr
