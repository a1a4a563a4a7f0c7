"""README.md's tour runs as written, and its shell examples work on the checkpoints it makes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _blocks(language: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_readme_has_the_two_setup_commands_and_ci_runs_the_test_command() -> None:
    bash = _blocks("bash")
    assert bash[0].startswith('pip install -e ".[convert]"') and "docs/examples/minilm.py" in bash[0]
    assert bash[1] == 'pip install -e ".[dev]" && \\\npython -m pytest -q -n auto\n'
    assert 'pip install -e ".[dev]" && \\\npython -m pytest -q -n auto\n' in (ROOT / ".ci" / "run").read_text()


def test_readme_tour_runs_and_prints_what_it_promises(tmp_path: Path) -> None:
    script = tmp_path / "tour.py"
    script.write_text(_blocks("python")[0], encoding="utf-8")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Variable (2, 3) float32 cpu:0 [2. 2. 1.]"
    assert lines[1] == "['conv1/weights', 'conv1/biases'] ['conv1/weights', 'conv1/biases', 'global_step']"
    assert lines[2] == "['conv1/weights', 'conv1/biases', 'global_step'] 1200 {'run': 'a7'}"
    assert lines[3].startswith("VariableInfo(name='conv1/biases', shape=(32,), dtype='float32', nbytes=128, "
                               "trainable=True, collections=('variables', 'trainable_variables'), "
                               "checksum='crc32c:")
    assert lines[4] == "CheckpointExistsError not a checkpoint"
    assert lines[5] == "ckpt-400.h5 ['ckpt-200.h5', 'ckpt-300.h5', 'ckpt-400.h5']"

    expected_exit = {"ls": 0, "show": 0, "diff": 1, "verify": 0, "convert": 0}
    shell = next(b for b in _blocks("bash") if b.startswith("varstore ls"))
    outputs = {}
    for command in shell.splitlines():  # every line, as written, on the files the tour made
        args = command.split("#")[0].split()
        run = subprocess.run([sys.executable, "-m", "varstore_cli", *args[1:]], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == expected_exit[args[1]], (command, run.stdout, run.stderr)
        outputs[" ".join(args[1:])] = run.stdout
    assert "conv1/weights" in outputs["diff ckpt/model.h5 ckpt/run/ckpt-400.h5"]
    assert outputs["ls ckpt/run"].startswith("ckpt/run/ckpt-400.h5  (varstore-hdf5, version 1.0, step 400)")
    assert [line.split()[0] for line in outputs["ls ckpt/run --checkpoints"].splitlines()[1:4]] == \
        ["ckpt-200.h5", "ckpt-300.h5", "ckpt-400.h5"]
    assert outputs["convert ckpt/model.h5 ckpt/model.safetensors"].startswith(
        "converted ckpt/model.h5 (varstore-hdf5) -> ckpt/model.safetensors (safetensors): 3 variables")
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()


def test_readme_lists_every_documentation_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Documentation", 1)[1].split("\n## ", 1)[0]
    pages = sorted(p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("docs/*.md"), *ROOT.glob("docs/guide/*.md")])
    assert [page for page in pages if f"`{page}`" not in section] == []
    assert "`docs/benchmarks/README.md`" in section
    for page in pages:  # each page opens with a heading
        assert (ROOT / page).read_text(encoding="utf-8").startswith("# "), page


def test_readme_says_to_make_a_virtual_environment_before_the_set_up_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    venv = text.index("`python3 -m venv .venv && . .venv/bin/activate`")
    assert venv < text.index('pip install -e ".[convert]"') and venv > text.index("## Set-up: two commands")
    assert "python3 -m venv" in (ROOT / ".ci" / "run").read_text()  # what CI does first
