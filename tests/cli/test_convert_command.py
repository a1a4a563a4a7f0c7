"""varstore convert (cli/varstore_cli/convert_command.py) on real files: reports, --filter/--rename/--dtype, the progress bar."""

from __future__ import annotations

import json

from varstore import open_checkpoint
from varstore_cli import convert_command


def test_convert_writes_a_checkpoint_and_reports(run, tf_checkpoint, tmp_path):
    dst = tmp_path / "out.h5"
    result = run("convert", tf_checkpoint, dst)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"converted {tf_checkpoint} (tf) -> {dst} (h5): 18 variables, 7.1 KiB\n"
    assert result.stderr == ""  # no progress bar: stderr is not a terminal
    with open_checkpoint(dst) as reader:
        assert reader.format == "varstore-hdf5" and len(reader.keys()) == 18


def test_convert_json_filter_rename_dtype(run, tf_checkpoint, tmp_path):
    dst = tmp_path / "enc.safetensors"
    result = run("convert", "--json", "--filter", "encoder/*", "--rename", "encoder/=enc/",
                 "--dtype", "float16", tf_checkpoint, dst)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "varstore.convert/1"
    assert (doc["source"], doc["destination"]) == (str(tf_checkpoint), str(dst))
    assert (doc["source_format"], doc["destination_format"]) == ("tf", "safetensors")
    assert doc["variables"] == 4 and doc["nbytes"] == (8 + 600 + 16 + 1152) * 2
    assert doc["renamed"]["encoder/layer_a/weights"] == "enc/layer_a/weights"
    assert doc["skipped"] == [] and isinstance(doc["notes"], list)
    with open_checkpoint(dst) as reader:
        assert sorted(reader.keys()) == ["enc/layer_a/biases", "enc/layer_a/weights", "enc/layer_b/biases",
                                         "enc/layer_b/weights"]
        assert reader.info("enc/layer_b/weights").dtype == "float16"


def test_convert_text_counts_renames_and_lists_them_with_v(run, tf_checkpoint, tmp_path):
    out = run("convert", "--filter", "state/*", "--rename", "state/=s/", tf_checkpoint, tmp_path / "s.npz")
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[1:] == ["renamed 3 variables (-v lists them)"]
    out = run("convert", "-v", "--force", "--filter", "state/*", "--rename", "state/=s/", tf_checkpoint,
              tmp_path / "s.npz")
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[1:] == [
        "renamed 3 variables:",
        "  state/custom_aux  ->  s/custom_aux",
        "  state/ema_decay   ->  s/ema_decay",
        "  state/model_var   ->  s/model_var",
    ]


def test_convert_bad_rename_is_a_usage_error(run, tf_checkpoint, tmp_path):
    result = run("convert", "--rename", "noequals", tf_checkpoint, tmp_path / "x.h5")
    assert result.exit_code == 2
    assert "Invalid value for '--rename': rename rule 'noequals' needs the form OLD=NEW" in result.stderr
    assert not (tmp_path / "x.h5").exists()


def test_progress_bar_only_on_a_terminal_and_never_with_json(run, tf_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(convert_command, "_stderr_is_terminal", lambda: True)
    shown = run("convert", tf_checkpoint, tmp_path / "tty.h5")
    assert shown.exit_code == 0, shown.output
    assert "%|" in shown.stderr and "B/s" in shown.stderr  # tqdm drew a byte-count bar on stderr
    assert shown.stdout.startswith("converted ")
    quiet = run("convert", "--json", tf_checkpoint, tmp_path / "json.h5")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    json.loads(quiet.stdout)


def test_piped_stderr_is_not_a_terminal_under_clirunner(run, tf_checkpoint, tmp_path):
    result = run("convert", tf_checkpoint, tmp_path / "piped.zarr")
    assert result.exit_code == 0 and result.stderr == "" and "%|" not in result.output
