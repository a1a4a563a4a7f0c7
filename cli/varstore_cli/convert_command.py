"""varstore convert: copy a checkpoint into another format, with --filter, --rename, --separator, --dtype, a progress bar.

Parses the options (`--rename` through the library's one OLD=NEW parser),
calls `varstore.convert`, and prints a summary or the
varstore.convert/1 JSON document. The only CLI module that draws a tqdm bar;
never catches library errors (main.py does).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import click

from varstore_cli.terminal import echo_line, escape_for_terminal
from varstore_cli import formatting as fmt
from varstore_cli.options import (
    FormatOption,
    echo_json,
    is_url,
    read_format_help,
    reader_options,
    resolve_path,
    selection_options,
    skip_object_arrays_option,
    storage_option,
    storage_options,
    with_latest_on_a_bucket,
    write_format_help,
)

__all__ = ["convert_command", "make_progress", "parse_rename"]


def parse_rename(values: tuple[str, ...]) -> list[tuple[str, str]]:
    """`--rename OLD=NEW` options as (old, new) prefix pairs, in the order given.

    Parsed by varstore.formats.rename.parse_rename_rule (the library's one
    parser); a malformed rule is a usage error of `--rename`.
    """
    from varstore import parse_rename_rule
    from varstore.errors import ConversionError

    pairs = []
    for value in values:
        try:
            pairs.append(parse_rename_rule(value))
        except ConversionError as err:
            raise click.BadParameter(str(err), param_hint="'--rename'") from err
    return pairs


def make_progress(enabled: bool, stream: TextIO | None = None, mininterval_s: float = 0.1
                  ) -> tuple[Callable[[int, int, str], None] | None, Callable[[], None]]:
    """A tqdm progress callback for `convert(progress=...)` and a function that closes the bar.

    Args:
      enabled: False gives (None, no-op): no bar.
      stream: where the bar is drawn (default sys.stderr).
      mininterval_s: least time between redraws (seconds).

    Returns:
      (callback(done_bytes, total_bytes, name), close). Without tqdm installed
      the callback is None: conversions work, they just show no bar.
    """
    if not enabled:
        return None, lambda: None
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm comes with the [convert] extra; no bar without it
        return None, lambda: None
    state: dict[str, Any] = {}

    def update(done_bytes: int, total_bytes: int, name: str) -> None:
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024,
                                      file=stream or sys.stderr, leave=False, dynamic_ncols=True,
                                      mininterval=mininterval_s)
        bar.total = total_bytes
        bar.set_postfix_str(escape_for_terminal(name), refresh=False)  # a name from a file, on a terminal
        bar.update(done_bytes - bar.n)

    def close() -> None:
        if "bar" in state:
            state["bar"].close()

    return update, close


def stderr_is_terminal() -> bool:
    """True when stderr is a terminal (a progress bar is drawn only then; never under CliRunner or a pipe)."""
    return _stderr_is_terminal()


def _stderr_is_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)  # click's CliRunner and pipes give False
    return bool(isatty and isatty())


def _report_json(report: Any) -> dict[str, Any]:
    """The varstore.convert/1 body from a ConvertReport (fields listed in docs/cli.md)."""
    return {
        "source": str(report.source),
        "destination": str(report.destination),
        "source_format": report.source_format,
        "destination_format": report.destination_format,
        "variables": int(report.variables),
        "nbytes": int(report.bytes),
        "renamed": dict(report.renamed),
        "skipped": [{"name": s.name, "reason": s.reason} for s in report.skipped],
        "notes": list(report.notes),
    }


@click.command("convert")
@click.argument("src", type=click.Path(readable=False))  # the library names an unreadable path
@click.argument("dst", type=click.Path(readable=False))  # the library names an unreadable path
@click.option("--from", "from_format", metavar="F", cls=FormatOption,
              help_text=lambda: f"Source format (default: detected). {read_format_help()}")
@click.option("--to", "to_format", metavar="F", cls=FormatOption, help_text=write_format_help)
@selection_options("source ")
@click.option("--rename", "renames", metavar="OLD=NEW", multiple=True,
              help="Replace the name prefix OLD by NEW (repeatable; the first matching rule wins; "
                   "applied after --separator).")
@click.option("--separator", metavar="SEP",
              help="Turn every SEP in a source name into '/' (before --rename): --separator . maps "
                   "'encoder.layer.0.weight' to 'encoder/layer/0/weight'.")
@click.option("--force", is_flag=True, help="Replace DST if it is a checkpoint of its own format (never another file or directory, never SRC).")
@skip_object_arrays_option
@click.option("--dtype", metavar="D", help="Cast every floating variable to this dtype (e.g. float16, bfloat16).")
@click.option("--max-shard-size", metavar="SIZE",
              help="Write a sharded safetensors directory (HuggingFace layout) with shards of at most SIZE "
                   "(500MB, 5GB, 2GiB or bytes).")
@click.option("--option", "write_options", metavar="KEY=VALUE", multiple=True,
              help="A destination writer's option (repeatable; VALUE is read as JSON when it parses): "
                   "gguf_type=q8_0 (GGUF: f32, f16, bf16, q8_0), partitions='{\"emb\": 3}' (TF: "
                   "parts along axis 0, cut as fixed_size_partitioner).")
@click.option("--dequantize", is_flag=True,
              help="GGUF: read quantized tensors as float32 (Q4_0 ... Q8_0, K- and IQ-quants with the gguf package "
                   "of the [convert] extra) instead of raw blocks; the tensors left raw are named.")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.convert/1 JSON document; no progress bar.")
@click.option("-v", "--verbose", is_flag=True, help="List every renamed variable (old -> new), not only their count.")
@storage_option
def convert_command(src: str, dst: str, from_format: str | None, to_format: str | None, patterns: tuple[str, ...],
                    excludes: tuple[str, ...],
                    renames: tuple[str, ...], separator: str | None, force: bool, skip_object_arrays: bool,
                    dtype: str | None, max_shard_size: str | None, write_options: tuple[str, ...], dequantize: bool,
                    as_json: bool, verbose: bool) -> None:
    """Convert a checkpoint to another format.

    Streams SRC to DST variable by variable, so memory stays near the largest
    variable. An existing DST is replaced only with --force. SRC may be a
    CheckpointManager directory (its latest checkpoint). A progress bar is
    drawn when stderr is a terminal (never with --json or when piped)."""
    rename = parse_rename(renames)
    if separator == "":
        raise click.BadParameter("must not be empty", param_hint="'--separator'")
    remote_source = is_url(src)
    src = src if remote_source else resolve_path(src)
    from varstore import convert
    from varstore import parse_write_options

    progress, close = make_progress(enabled=not as_json and _stderr_is_terminal())
    try:
        options: dict[str, Any] = {"dequantize": True} if dequantize else {}

        def convert_from(source: str) -> Any:
            return convert(source, dst, from_format=from_format, to_format=to_format, filter=patterns or None,
                           exclude=excludes,
                           rename=rename, dtype=dtype, progress=progress, separator=separator, force=force,
                           max_shard_size=max_shard_size, write_options=parse_write_options(write_options),
                           storage_options=storage_options(),
                           **({} if remote_source else reader_options(source, from_format, skip_object_arrays)),
                           **options)

        # a manager directory on a bucket: its latest checkpoint
        report = with_latest_on_a_bucket(src, convert_from) if remote_source else convert_from(src)
    finally:
        close()
    document = _report_json(report)
    if as_json:
        echo_json({"schema": "varstore.convert/1", **document})
        return
    echo_line(_convert_summary(document))
    if document["renamed"]:  # a count; the list (one line per name: thousands for a model) with -v
        count = fmt.plural(len(document["renamed"]), "variable")
        echo_line(f"renamed {count}:" if verbose else f"renamed {count} (-v lists them)")
        if verbose:
            for line in fmt.table([[old, "->", new] for old, new in document["renamed"].items()]):
                echo_line("  " + line)
    for note in document["notes"]:
        echo_line(f"note: {note}")
    skipped = document["skipped"]
    if skipped:
        echo_line(f"skipped {fmt.plural(len(skipped), 'entry', 'entries')}:")
        for line in fmt.table([[s["name"], s["reason"]] for s in skipped]):
            echo_line("  " + line)


def _convert_summary(document: dict[str, Any]) -> str:
    return (f"converted {document['source']} ({document['source_format']}) -> {document['destination']} "
            f"({document['destination_format']}): {fmt.plural(document['variables'], 'variable')}, "
            f"{fmt.human_size(document['nbytes'])}")
