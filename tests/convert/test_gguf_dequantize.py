"""GGUF --dequantize: every type gguf's reference code dequantizes becomes float32; the rest stay raw and are named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import varstore as vs

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType


def _write(path: Path, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A GGUF file with Q5_0, Q4_1 and Q8_0 tensors of `x`, a Q6_K and a Q8_1 tensor of raw blocks."""
    rng = np.random.default_rng(7)
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, kind in (("blk.0.q5_0", Q.Q5_0), ("blk.0.q4_1", Q.Q4_1), ("blk.0.q8_0", Q.Q8_0)):
        writer.add_tensor(name, gguf.quants.quantize(x, kind), raw_dtype=kind)
    k_blocks = rng.integers(0, 256, (2, gguf.GGML_QUANT_SIZES[Q.Q6_K][1]), dtype=np.uint8)
    k_blocks[:, -2:] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)  # the super-block scale d
    writer.add_tensor("blk.0.q6_k", k_blocks, raw_dtype=Q.Q6_K)
    q8_1 = np.zeros((1, 2 * gguf.GGML_QUANT_SIZES[Q.Q8_1][1]), np.uint8)
    writer.add_tensor("blk.0.q8_1", q8_1, raw_dtype=Q.Q8_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return k_blocks, q8_1


def test_dequantize_covers_q5_and_k_quants_and_names_what_stays_raw(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    path = tmp_path / "q.gguf"
    k_blocks, q8_1 = _write(path, x)
    with vs.open_checkpoint(path, dequantize=True) as reader:
        assert {k: (reader.info(k).dtype, reader.info(k).shape) for k in reader.keys()} == {
            "blk.0.q5_0": ("float32", (4, 64)), "blk.0.q4_1": ("float32", (4, 64)),
            "blk.0.q8_0": ("float32", (4, 64)), "blk.0.q6_k": ("float32", (2, 256)),
            "blk.0.q8_1": ("uint8", (1, 80))}
        for name, kind, tolerance in (("blk.0.q5_0", Q.Q5_0, 0.1), ("blk.0.q4_1", Q.Q4_1, 0.25),
                                      ("blk.0.q8_0", Q.Q8_0, 0.02)):
            values = reader.read(name)
            np.testing.assert_array_equal(values, gguf.quants.dequantize(gguf.quants.quantize(x, kind), kind))
            assert float(np.abs(values - x).max()) < tolerance, name
        np.testing.assert_array_equal(reader.read("blk.0.q6_k"), gguf.quants.dequantize(k_blocks, Q.Q6_K))
        np.testing.assert_array_equal(reader.read("blk.0.q8_1"), q8_1)
        assert reader.notes == ("--dequantize left 1 tensor(s) as raw blocks (uint8; no dequantizer for their "
                                "type here or in the installed gguf package): blk.0.q8_1 (Q8_1)",)
    report = vs.convert(path, tmp_path / "q.npz", dequantize=True)
    assert report.notes == reader.notes
    with vs.open_checkpoint(path) as raw:  # without dequantize nothing is noted: raw blocks are what was asked
        assert raw.notes == () and raw.info("blk.0.q5_0").dtype == "uint8"


def test_the_cli_prints_the_tensors_left_raw(run_cli, tmp_path: Path) -> None:
    x = np.ones((1, 32), np.float32)
    path = tmp_path / "q.gguf"
    _write(path, np.tile(x, (4, 2)))
    result = run_cli("convert", "--dequantize", path, tmp_path / "q.safetensors")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "note: --dequantize left 1 tensor(s) as raw blocks (uint8; no dequantizer for their type here or in "
        "the installed gguf package): blk.0.q8_1 (Q8_1)")


@pytest.fixture
def run_cli():
    from click.testing import CliRunner

    from varstore_cli.main import cli

    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args], prog_name="varstore")
