"""Issue 9, finding 6 (and the CLI side of 1): CLI words in messages, manager directories as PATH,
`ls --checkpoints`, `convert --separator/--force`, and the one OLD=NEW parser."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

import varstore as vs
from varstore_cli.words import LIBRARY_PARAMETERS, cli_words

ROOT = Path(__file__).resolve().parents[2]
Run = Callable[..., Result]


def _manager(tmp_path: Path) -> Path:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=3)
    for step in (100, 200, 300):
        manager.save({"enc/w": np.full(3, step, np.float32)}, step=step)
    return tmp_path / "run"


def test_convert_refuses_existing_destination_in_cli_words(run: Run, tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    model = tmp_path / "model.safetensors"
    save_file({"w": np.ones(3, np.float32)}, str(model))
    before = model.read_bytes()
    src = vs.save(tmp_path / "self.h5", {"w": np.zeros(3)})
    result = run("convert", src, model)  # SRC and DST swapped by mistake
    assert result.exit_code == 2
    assert result.stderr.startswith("varstore: error: ")
    assert "pass --force to replace it" in result.stderr and "force=True" not in result.stderr
    assert model.read_bytes() == before
    result = run("convert", src, model, "--force")
    assert result.exit_code == 0, result.stderr
    assert vs.load(model)["w"].tolist() == [0.0, 0.0, 0.0]


def test_convert_same_file_is_refused_even_with_force(run: Run, tmp_path: Path) -> None:
    src = vs.save(tmp_path / "m.h5", {"w": np.ones(2)})
    before = src.read_bytes()
    (tmp_path / "alias.h5").symlink_to(src)
    result = run("convert", src, tmp_path / "alias.h5", "--force")
    assert result.exit_code == 2 and "is the source" in result.stderr and "even with --force" in result.stderr
    assert src.read_bytes() == before


def test_no_suffix_message_names_the_to_option(run: Run, tmp_path: Path) -> None:
    src = vs.save(tmp_path / "m.h5", {"w": np.ones(2)})
    result = run("convert", src, tmp_path / "out")
    assert result.exit_code == 2 and "or pass --to" in result.stderr and "to_format" not in result.stderr


def test_npz_object_arrays_message_names_the_cli_option_and_the_option_works(run: Run, tmp_path: Path) -> None:
    np.savez(tmp_path / "o.npz", good=np.arange(3), bad=np.array([{"a": 1}], dtype=object))
    result = run("ls", tmp_path / "o.npz")
    assert result.exit_code == 2 and "--skip-object-arrays" in result.stderr
    assert "skip_object_arrays" not in result.stderr
    result = run("ls", tmp_path / "o.npz", "--skip-object-arrays")
    assert result.exit_code == 0, result.stderr
    assert "good" in result.stdout and "skipped 1 entry" in result.stdout


def test_separator_maps_every_separator_before_rename(run: Run, tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    src = tmp_path / "bert.safetensors"
    save_file({"encoder.layer.0.attention.self.query.weight": np.ones((2, 2), np.float32),
               "pooler.dense.bias": np.zeros(2, np.float32)}, str(src))
    result = run("convert", src, tmp_path / "out.zarr", "--separator", ".", "--rename", "pooler/=head/",
                 "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["renamed"] == {
        "encoder.layer.0.attention.self.query.weight": "encoder/layer/0/attention/self/query/weight",
        "pooler.dense.bias": "head/dense/bias"}
    assert sorted(vs.load(tmp_path / "out.zarr")) == ["encoder/layer/0/attention/self/query/weight",
                                                      "head/dense/bias"]


def test_every_path_accepts_a_manager_directory(run: Run, tmp_path: Path) -> None:
    directory = _manager(tmp_path)
    result = run("ls", directory)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith(f"{directory}/ckpt-300.h5 ")
    assert run("show", directory, "enc/w", "--json").exit_code == 0
    shown = json.loads(run("show", directory, "enc/w", "--json").stdout)
    assert shown["values"] == [300.0, 300.0, 300.0]
    assert run("verify", directory).exit_code == 0
    assert run("diff", directory, directory / "ckpt-300.h5").exit_code == 0
    assert run("diff", directory, directory / "ckpt-200.h5").exit_code == 1
    result = run("convert", directory, tmp_path / "latest.npz")
    assert result.exit_code == 0, result.stderr
    assert vs.load(tmp_path / "latest.npz")["enc/w"].tolist() == [300.0] * 3


def test_ls_checkpoints_lists_step_time_size_and_marks_latest(run: Run, tmp_path: Path) -> None:
    directory = _manager(tmp_path)
    result = run("ls", directory, "--checkpoints")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["checkpoint", "step", "created", "(UTC)", "size"]
    assert [line.split()[:2] for line in lines[1:4]] == [["ckpt-100.h5", "100"], ["ckpt-200.h5", "200"],
                                                          ["ckpt-300.h5", "300"]]
    assert lines[3].endswith("latest") and not lines[1].endswith("latest")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", lines[1])
    assert lines[4].startswith("total: 3 checkpoints")
    document = json.loads(run("ls", directory, "--checkpoints", "--json").stdout)
    assert document["schema"] == "varstore.checkpoints/1"
    assert [(c["step"], c["latest"]) for c in document["checkpoints"]] == [(100, False), (200, False), (300, True)]
    assert all(c["nbytes"] == (directory / Path(c["path"]).name).stat().st_size for c in document["checkpoints"])
    result = run("ls", tmp_path / "nothing-here", "--checkpoints")
    assert result.exit_code == 2 and "not a CheckpointManager directory" in result.stderr


def test_rename_rules_have_one_parser_for_library_and_cli() -> None:
    from varstore.formats.rename import parse_rename_rule

    cli_source = (ROOT / "cli" / "varstore_cli" / "convert_command.py").read_text()
    library_source = (ROOT / "varstore" / "formats" / "__init__.py").read_text()
    assert "parse_rename_rule" in cli_source and ".partition(\"=\")" not in cli_source
    assert "rename_pairs" in library_source and "split(\"=\"" not in library_source
    assert parse_rename_rule("a/=b/") == ("a/", "b/") and parse_rename_rule("x==y") == ("x", "=y")


@pytest.mark.parametrize("rule", ["noequals", "=new"])
def test_bad_rename_is_the_same_error_in_library_and_cli(run: Run, tmp_path: Path, rule: str) -> None:
    src = vs.save(tmp_path / "m.h5", {"w": np.ones(2)})
    with pytest.raises(vs.ConversionError, match="needs the form OLD=NEW"):
        vs.convert(src, tmp_path / "o.zarr", rename=[rule])
    result = run("convert", src, tmp_path / "o.zarr", "--rename", rule)
    assert result.exit_code == 2 and "needs the form OLD=NEW" in result.stderr


_CLI_PATH = ("varstore/formats", "varstore/backends", "varstore/inspect", "varstore/storage",
             "varstore/checkpoint/read/reader.py", "varstore/checkpoint/read/reader_api.py", "varstore/checkpoint/read/detection.py",
             "varstore/checkpoint/read/locations.py", "varstore/checkpoint/format/packed.py", "varstore/checkpoint/read/read_engine.py",
             "varstore/checkpoint/write/overwrite.py", "varstore/checkpoint/manage/managed.py",
             "varstore/checkpoint/format/manifest.py", "varstore/checkpoint/write/writer.py", "varstore/checkpoint/write/plan.py",
             "varstore/checkpoint/write/write_engine.py", "varstore/checkpoint/publish/commit.py", "varstore/checkpoint/read/load.py",
             "varstore/checkpoint/publish/atomic.py", "varstore/checkpoint/format/checksum.py", "varstore/dtypes.py")


#: Library-only entry points no CLI command calls (register_format is Python API for plug-in formats).
_NOT_ON_CLI_PATH = ("varstore/formats/registry.py",)


def _raised_messages() -> list[tuple[str, str]]:
    """(file, literal text) of every string in a `raise X(...)` of the modules the CLI runs."""
    found = []
    for prefix in _CLI_PATH:
        base = ROOT / prefix
        for path in sorted(base.rglob("*.py")) if base.is_dir() else [base]:
            if str(path.relative_to(ROOT)) in _NOT_ON_CLI_PATH:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                    parts = [n.value for n in ast.walk(node.exc)
                             if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                    if parts:
                        found.append((str(path.relative_to(ROOT)), "".join(parts)))
    return found


def test_messages_raised_on_the_cli_path_use_cli_words() -> None:
    messages = _raised_messages()
    assert len(messages) > 100
    python_call = re.compile(r"\b[a-z_]+=(True|False|None)\b")
    offenders = []
    for where, text in messages:
        shown = cli_words(text)
        if python_call.search(shown) or any(p in shown for p in LIBRARY_PARAMETERS):
            offenders.append((where, shown))
    assert offenders == []


def test_every_option_the_translations_name_exists() -> None:
    from varstore_cli.commands import COMMANDS
    from varstore_cli.words import LIBRARY_TO_CLI

    options = {opt for command in COMMANDS for param in command.params for opt in getattr(param, "opts", [])}
    named = {word for _, cli in LIBRARY_TO_CLI for word in re.findall(r"--[a-z-]+", cli)}
    assert named and named <= options, named - options


def test_ls_and_convert_treat_both_layouts_alike(run: Run, tmp_path: Path) -> None:
    values = {f"block{i}/bias": np.full(5, i, np.float32) for i in range(6)}
    values["block0/kernel"] = np.arange(20, dtype=np.float64).reshape(4, 5)
    listings, loaded = [], []
    for layout in ("per-variable", "packed"):
        path = vs.save(tmp_path / f"{layout}.h5", values, layout=layout)
        document = json.loads(run("ls", path, "--json").stdout)
        listings.append([(v["name"], v["shape"], v["dtype"], v["checksum"]) for v in document["variables"]])
        result = run("convert", path, tmp_path / f"{layout}.npz")
        assert result.exit_code == 0, result.stderr
        loaded.append(vs.load(tmp_path / f"{layout}.npz"))
    assert listings[0] == listings[1] and len(listings[0]) == 7
    assert list(loaded[0]) == list(loaded[1]) == list(values)
    for name, value in values.items():
        assert loaded[0][name].tolist() == loaded[1][name].tolist() == value.tolist()
