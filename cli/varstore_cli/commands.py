"""The varstore subcommands: ls, show, diff, verify, convert.

Each command parses its options, calls the public library API
(`varstore.convert.open_checkpoint`, `varstore.convert.convert`,
`varstore.inspect`), and prints a table or a versioned JSON document
(schemas in docs/cli.md). Commands never catch library errors: main.py turns
them into one line and exit status 2.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import math
import sys
from collections.abc import Callable
from typing import Any, TextIO

import click

from varstore.checkpoint.reader_api import CheckpointReader, VariableInfo
from varstore.errors import CheckpointNotFoundError, UnknownVariableError
from varstore.inspect import diff_checkpoints, scope_tree, variable_stats
from varstore_cli import formatting as fmt

__all__ = ["COMMANDS", "ATTRIBUTES_SUFFIX", "make_progress", "parse_rename", "resolve_path"]

#: Suffix of TF2 object-based checkpoint keys, hidden by `ls --strip-attributes`.
ATTRIBUTES_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"

def _read_format_help() -> str:
    from varstore.convert.registry import read_names

    return f"Read PATH as this format instead of detecting it: {', '.join(read_names())}."


def _write_format_help() -> str:
    from varstore.convert.registry import write_names

    return f"Destination format (default: from DST's suffix): {', '.join(write_names())}."


class _FormatOption(click.Option):
    """An option whose help lists the formats registered when help is shown (varstore.convert.registry)."""

    def __init__(self, *args: Any, help_text: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._help_text = help_text

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = self._help_text()
        return super().get_help_record(ctx)


def _format_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--format", "format_", metavar="F", cls=_FormatOption, help_text=_read_format_help)


# ------------------------------------------------------------------ helpers
def resolve_path(path: str) -> str:
    """PATH as given, or for a CheckpointManager directory its latest checkpoint (tf.train.latest_checkpoint).

    Raises:
      CheckpointNotFoundError: a manager directory without checkpoints.
    """
    from varstore.checkpoint.managed import is_manager_directory, latest_checkpoint

    if not is_manager_directory(path):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise CheckpointNotFoundError(f"'{path}' is a CheckpointManager directory without checkpoints")
    return str(latest)


def _reader_options(path: str, format: str | None, skip_object_arrays: bool) -> dict[str, Any]:
    """open_checkpoint options: skip_object_arrays only where the file is an npz (other readers take none)."""
    if not skip_object_arrays:
        return {}
    from varstore.convert import detect_format

    kind = (format or "").lower() or detect_format(path)
    return {"skip_object_arrays": True} if kind == "npz" else {}


STORAGE_OPTION_HELP = ("For s3://, gs://, az:// paths: a client setting KEY=VALUE (endpoint, region, "
                       "access_key_id, ...; repeatable). Settings also come from AWS_*, GOOGLE_*, AZURE_STORAGE_*.")


def _remember_storage_options(ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> None:
    if values:
        root = ctx.find_root()
        root.ensure_object(dict)
        merged = dict(root.obj.get("storage_options") or {})
        from varstore.storage._urls import parse_storage_options

        try:
            merged.update(parse_storage_options(values))
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="'--storage-option'") from err
        root.obj["storage_options"] = merged


def storage_option(command: Any) -> Any:
    """Adds --storage-option KEY=VALUE (repeatable) to a command; the settings reach every URL it opens."""
    return click.option("--storage-option", "storage_options", metavar="KEY=VALUE", multiple=True,
                        expose_value=False, callback=_remember_storage_options,
                        help=STORAGE_OPTION_HELP)(command)


def _storage_options() -> dict[str, str] | None:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    return (ctx.find_root().obj or {}).get("storage_options") or None


def _open(path: str, format: str | None = None, skip_object_arrays: bool = False) -> CheckpointReader:
    from varstore.convert import open_checkpoint  # the converters are imported only when needed
    from varstore.storage import is_remote

    if is_remote(path):
        return open_checkpoint(path, format=format, storage_options=_storage_options())
    path = resolve_path(path)
    return open_checkpoint(path, format=format, **_reader_options(path, format, skip_object_arrays))


def _skip_object_arrays_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--skip-object-arrays", is_flag=True,
                        help="npz: skip members holding object arrays (never unpickled) instead of refusing "
                             "the file.")(function)


def _compact(value: Any) -> str:
    # allow_nan=False: the schemas spell non-finite numbers as strings, so a NaN here is a bug
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _echo_json(document: dict[str, Any]) -> None:
    """Prints one JSON document: top-level keys one per line, list items one per line.

    The layout is for reading and grepping only; consumers parse it as JSON.
    """
    lines = ["{"]
    items = list(document.items())
    for index, (key, value) in enumerate(items):
        comma = "," if index < len(items) - 1 else ""
        if isinstance(value, list) and value and all(isinstance(v, (dict, list)) for v in value):
            lines.append(f"  {_compact(key)}: [")
            lines += [f"    {_compact(v)}{',' if i < len(value) - 1 else ''}" for i, v in enumerate(value)]
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {_compact(key)}: {_compact(value)}{comma}")
    lines.append("}")
    click.echo("\n".join(lines))


def _strip(name: str, strip_attributes: bool) -> str:
    if strip_attributes and name.endswith(ATTRIBUTES_SUFFIX):
        return name[: -len(ATTRIBUTES_SUFFIX)]
    return name


def _elements(info: VariableInfo) -> int:
    return math.prod(info.shape)


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count:,} " + (word if count == 1 else plural or word + "s")


def _checkpoint_json(reader: CheckpointReader) -> dict[str, Any]:
    return {
        "path": reader.location,
        "format": reader.format,
        "format_version": reader.format_version,
        "step": reader.step,
        "metadata": reader.metadata,
    }


def _describe(reader: CheckpointReader) -> str:
    parts = [reader.format]
    if reader.format_version is not None:
        parts.append(f"version {reader.format_version}")
    if reader.step is not None:
        parts.append(f"step {reader.step}")
    return f"{reader.location}  ({', '.join(parts)})"


def _resolve_name(reader: CheckpointReader, name: str) -> str:
    """`name` itself, or its TF2 key with the attribute suffix, or an error with suggestions."""
    keys = reader.keys()
    if name in keys:
        return name
    if name + ATTRIBUTES_SUFFIX in keys:
        return name + ATTRIBUTES_SUFFIX
    close = difflib.get_close_matches(name, keys, n=3)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownVariableError(
        f"no variable '{name}' in '{reader.location}' ({reader.format}, {_plural(len(keys), 'variable')}); "
        f"{hint}`varstore ls {reader.location}` lists them")


# ----------------------------------------------------------------------- ls
@click.command("ls")
@click.argument("path", type=click.Path())
@click.option("--filter", "pattern", metavar="GLOB", help="Only names matching this shell glob ('encoder/*').")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.ls/1 JSON document.")
@click.option("--tree", is_flag=True, help="Show the scope tree with per-scope totals.")
@click.option("--strip-attributes", is_flag=True,
              help=f"Show TF2 object-checkpoint keys without '{ATTRIBUTES_SUFFIX}'.")
@_format_option()
@click.option("--checkpoints", "list_checkpoints", is_flag=True,
              help="PATH is a CheckpointManager directory: list its checkpoints (step, time, size; latest marked).")
@_skip_object_arrays_option
@storage_option
def ls_command(path: str, pattern: str | None, as_json: bool, tree: bool, strip_attributes: bool,
               format_: str | None, list_checkpoints: bool, skip_object_arrays: bool) -> None:
    """List the variables of a checkpoint.

    One line per variable of PATH: name, shape, dtype, size, trainable flag and
    collections; then totals, and the entries that are not variables with the
    reason they were skipped. PATH may be a CheckpointManager directory (its
    latest checkpoint); with --checkpoints, its checkpoints are listed instead."""
    if list_checkpoints:
        _list_checkpoints(path, as_json)
        return
    with _open(path, format_, skip_object_arrays) as reader:
        infos = reader.infos()
        if pattern is not None:
            infos = [i for i in infos if fnmatch.fnmatchcase(i.name, pattern)
                     or fnmatch.fnmatchcase(_strip(i.name, strip_attributes), pattern)]
        shown = [VariableInfo(_strip(i.name, strip_attributes), tuple(i.shape), i.dtype, i.nbytes,
                              i.trainable, tuple(i.collections), i.checksum, i.device, i.attributes)
                 for i in infos] if strip_attributes else infos
        totals = {"variables": len(infos), "elements": sum(_elements(i) for i in infos),
                  "nbytes": sum(i.nbytes for i in infos)}
        if as_json:
            variables = []
            for original, info in zip(infos, shown):
                entry = info.to_json()
                entry["key"] = original.name
                variables.append(entry)
            document: dict[str, Any] = {"schema": "varstore.ls/1", **_checkpoint_json(reader),
                                        "filter": pattern, "variables": variables, "totals": totals,
                                        "skipped": [{"name": s.name, "reason": s.reason}
                                                    for s in reader.skipped]}
            if tree:
                document["tree"] = scope_tree(shown).to_json()
            _echo_json(document)
            return
        click.echo(_describe(reader))
        if tree:
            lines = fmt.tree_lines(scope_tree(shown), label=".")
        else:
            rows = [[i.name, fmt.format_shape(i.shape), i.dtype, fmt.human_size(i.nbytes),
                     fmt.format_flag(i.trainable), fmt.format_collections(i.collections)] for i in shown]
            lines = fmt.table(rows, ["name", "shape", "dtype", "size", "trainable", "collections"],
                              right=(3,)) if rows else []
        for line in lines:
            click.echo(line)
        filtered = f" matching '{pattern}'" if pattern is not None else ""
        click.echo(f"total: {_plural(totals['variables'], 'variable')}{filtered}, "
                   f"{_plural(totals['elements'], 'element')}, {fmt.human_size(totals['nbytes'])}")
        if reader.skipped:
            click.echo(f"skipped {_plural(len(reader.skipped), 'entry', 'entries')}:")
            for line in fmt.table([[s.name, s.reason] for s in reader.skipped]):
                click.echo("  " + line)


def _list_checkpoints(path: str, as_json: bool) -> None:
    from varstore.checkpoint.managed import is_manager_directory, list_checkpoints

    if not is_manager_directory(path):
        raise CheckpointNotFoundError(
            f"'{path}' is not a CheckpointManager directory (no 'latest' pointer and no "
            f"'<name>-<step>.h5' or '.zarr' entries); --checkpoints lists a manager directory")
    found = list_checkpoints(path)
    if as_json:
        _echo_json({"schema": "varstore.checkpoints/1", "directory": path,
                    "checkpoints": [{"path": str(c.path), "step": c.step, "created_utc": c.created_utc,
                                     "nbytes": c.nbytes, "latest": c.latest} for c in found]})
        return
    rows = [[c.path.name, f"{c.step:,}", c.created_utc[:19].replace("T", " "), fmt.human_size(c.nbytes),
             "latest" if c.latest else ""] for c in found]
    for line in fmt.table(rows, ["checkpoint", "step", "created (UTC)", "size", ""], right=(1, 3)):
        click.echo(line.rstrip())
    click.echo(f"total: {_plural(len(found), 'checkpoint')}, "
               f"{fmt.human_size(sum(c.nbytes for c in found))}")


# --------------------------------------------------------------------- show
@click.command("show")
@click.argument("path", type=click.Path())
@click.argument("name")
@click.option("--values", "count", type=click.IntRange(min=0), default=10, show_default=True, metavar="N",
              help="Print the first N values (in C order); 0 prints none.")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.show/1 JSON document.")
@_format_option()
@_skip_object_arrays_option
@storage_option
def show_command(path: str, name: str, count: int, as_json: bool, format_: str | None,
                 skip_object_arrays: bool) -> None:
    """Show one variable: metadata, statistics, first values.

    Statistics are min, max, mean, std (over the finite elements) and the
    counts of NaN, inf and zero elements."""
    with _open(path, format_, skip_object_arrays) as reader:
        key = _resolve_name(reader, name)
        info = reader.info(key)
        value = reader.read(key)
        stats = variable_stats(value)
        first = value.reshape(-1)[:count]
        if as_json:
            _echo_json({"schema": "varstore.show/1", **_checkpoint_json(reader),
                        "variable": {**info.to_json(), "attributes": info.attributes},
                        "stats": stats.to_json(), "values": fmt.json_values(first)})
            return
        rows = [
            ["name", info.name],
            ["checkpoint", _describe(reader)],
            ["shape", fmt.format_shape(info.shape)],
            ["dtype", info.dtype],
            ["size", f"{fmt.human_size(info.nbytes)} ({_plural(stats.count, 'element')})"],
            ["trainable", fmt.format_flag(info.trainable)],
            ["collections", fmt.format_collections(info.collections)],
            ["checksum", info.checksum or "-"],
            ["device", info.device or "-"],
        ]
        rows += [[f"attribute {k}", json.dumps(v, ensure_ascii=False)] for k, v in sorted(info.attributes.items())]
        non_tensor = reader.metadata.get("non_tensor") if isinstance(reader.metadata, dict) else None
        if isinstance(non_tensor, dict):  # a torch / DCP file's epoch, lr, param_groups ...
            rows += [[f"non-tensor {k}", json.dumps(v, ensure_ascii=False)] for k, v in non_tensor.items()]
        if stats.kind == "complex":
            rows.append(["stats of", "|x| (magnitude) of the finite elements"])
        rows += [["min", fmt.format_number(stats.min)], ["max", fmt.format_number(stats.max)],
                 ["mean", fmt.format_number(stats.mean)], ["std", fmt.format_number(stats.std)],
                 ["nan", fmt.format_number(stats.nan_count)], ["inf", fmt.format_number(stats.inf_count)],
                 ["zeros", fmt.format_number(stats.zeros)]]
        if count:
            rows.append([f"values[:{len(first)}]" if len(first) < stats.count else "values",
                         fmt.format_values(first)])
        for line in fmt.table(rows):
            click.echo(line)


# --------------------------------------------------------------------- diff
@click.command("diff")
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option("--rtol", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Relative tolerance: equal when |a-b| <= atol + rtol*max(|a|,|b|).")
@click.option("--atol", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Absolute tolerance.")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.diff/1 JSON document.")
@storage_option
@click.pass_context
def diff_command(ctx: click.Context, a: str, b: str, rtol: float, atol: float, as_json: bool) -> None:
    """Compare two checkpoints name by name.

    Lists the variables added, removed, with changed shape or dtype, and those
    whose values differ. Exit status 0 when equal, 1 when they differ, 2 on
    error (as diff(1))."""
    with _open(a) as reader_a, _open(b) as reader_b:
        result = diff_checkpoints(reader_a, reader_b, rtol=rtol, atol=atol)
        if as_json:
            _echo_json({"schema": "varstore.diff/1", "a": _checkpoint_json(reader_a),
                        "b": _checkpoint_json(reader_b), **result.to_json()})
        else:
            click.echo(f"--- {_describe(reader_a)}")
            click.echo(f"+++ {_describe(reader_b)}")
            rows = [["added", n, _brief(reader_b.info(n))] for n in result.added]
            rows += [["removed", n, _brief(reader_a.info(n))] for n in result.removed]
            rows += [["shape", c.name, f"{fmt.format_shape(c.shape_a)} -> {fmt.format_shape(c.shape_b)}"]
                     for c in result.shape_changed]
            rows += [["dtype", c.name, f"{c.dtype_a} -> {c.dtype_b}"] for c in result.dtype_changed]
            for d in result.values_differ:
                detail = (f"{d.mismatched:,} of {_plural(d.count, 'element')} "
                          f"{'differs' if d.mismatched == 1 else 'differ'}")
                if d.max_abs_diff is not None:
                    detail += (f", max abs diff {fmt.format_number(d.max_abs_diff)}"
                               f", max rel diff {fmt.format_number(d.max_rel_diff)}")
                rows.append(["values", d.name, detail])
            for line in fmt.table(rows):
                click.echo(line)
            summary = [f"{len(result.equal):,} equal", f"{len(result.added):,} added",
                       f"{len(result.removed):,} removed", f"{len(result.shape_changed):,} shape changed",
                       f"{len(result.dtype_changed):,} dtype changed",
                       f"{len(result.values_differ):,} values differ"]
            tolerance = f" (rtol {rtol:g}, atol {atol:g})" if rtol or atol else " (exact)"
            verdict = "checkpoints differ" if result.differs else "checkpoints are equal"
            click.echo(f"{verdict}{tolerance}: {', '.join(summary)}")
    ctx.exit(1 if result.differs else 0)


def _brief(info: VariableInfo) -> str:
    return f"{fmt.format_shape(info.shape)} {info.dtype}"


# ------------------------------------------------------------------- verify
@click.command("verify")
@click.argument("path", type=click.Path())
@_format_option()
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.verify/1 JSON document.")
@_skip_object_arrays_option
@storage_option
def verify_command(path: str, format_: str | None, as_json: bool, skip_object_arrays: bool) -> None:
    """Check a checkpoint's structure and checksums.

    Reads every variable of PATH and checks every checksum the format records.
    Exit status 0 when all is well; 2 with the first bad variable named."""
    with _open(path, format_, skip_object_arrays) as reader:
        infos = reader.infos()
        reader.verify()
        checked = sum(1 for i in infos if i.checksum is not None)
        total = sum(i.nbytes for i in infos)
        if as_json:
            _echo_json({"schema": "varstore.verify/1", **_checkpoint_json(reader), "ok": True,
                        "variables": len(infos), "nbytes": total, "checksums": checked})
            return
        how = (f"{_plural(checked, 'checksum')} matched" if checked
               else "no checksums recorded; every variable read back")
        click.echo(f"ok: {_describe(reader)}: {_plural(len(infos), 'variable')}, "
                   f"{fmt.human_size(total)}, {how}")


# ------------------------------------------------------------------ convert
def parse_rename(values: tuple[str, ...]) -> list[tuple[str, str]]:
    """`--rename OLD=NEW` options as (old, new) prefix pairs, in the order given.

    Parsed by varstore.convert.rename.parse_rename_rule (the library's one
    parser); a malformed rule is a usage error of `--rename`.
    """
    from varstore.convert.rename import parse_rename_rule
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
        bar.set_postfix_str(name, refresh=False)
        bar.update(done_bytes - bar.n)

    def close() -> None:
        if "bar" in state:
            state["bar"].close()

    return update, close


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
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--from", "from_format", metavar="F", cls=_FormatOption,
              help_text=lambda: f"Source format (default: detected). {_read_format_help()}")
@click.option("--to", "to_format", metavar="F", cls=_FormatOption, help_text=_write_format_help)
@click.option("--filter", "pattern", metavar="GLOB", help="Convert only names matching this shell glob.")
@click.option("--rename", "renames", metavar="OLD=NEW", multiple=True,
              help="Replace the name prefix OLD by NEW (repeatable; the first matching rule wins; "
                   "applied after --separator).")
@click.option("--separator", metavar="SEP",
              help="Turn every SEP in a source name into '/' (before --rename): --separator . maps "
                   "'encoder.layer.0.weight' to 'encoder/layer/0/weight'.")
@click.option("--force", is_flag=True, help="Replace DST if it exists (never allowed when DST is SRC).")
@_skip_object_arrays_option
@click.option("--dtype", metavar="D", help="Cast every floating variable to this dtype (e.g. float16, bfloat16).")
@click.option("--max-shard-size", metavar="SIZE",
              help="Write a sharded safetensors directory (HuggingFace layout) with shards of at most SIZE "
                   "(500MB, 5GB, 2GiB or bytes).")
@click.option("--dequantize", is_flag=True, help="GGUF: read Q8_0/Q4_0/Q4_1 tensors as float32 instead of raw blocks.")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.convert/1 JSON document; no progress bar.")
@storage_option
def convert_command(src: str, dst: str, from_format: str | None, to_format: str | None, pattern: str | None,
                    renames: tuple[str, ...], separator: str | None, force: bool, skip_object_arrays: bool,
                    dtype: str | None, max_shard_size: str | None, dequantize: bool, as_json: bool) -> None:
    """Convert a checkpoint to another format.

    Streams SRC to DST variable by variable, so memory stays near the largest
    variable. An existing DST is replaced only with --force. SRC may be a
    CheckpointManager directory (its latest checkpoint). A progress bar is
    drawn when stderr is a terminal (never with --json or when piped)."""
    rename = parse_rename(renames)
    if separator == "":
        raise click.BadParameter("must not be empty", param_hint="'--separator'")
    from varstore.convert import convert
    from varstore.storage import is_remote

    remote_source = is_remote(src)
    src = src if remote_source else resolve_path(src)

    progress, close = make_progress(enabled=not as_json and _stderr_is_terminal())
    try:
        options: dict[str, Any] = {"dequantize": True} if dequantize else {}
        report = convert(src, dst, from_format=from_format, to_format=to_format, filter=pattern,
                         rename=rename, dtype=dtype, progress=progress, separator=separator, force=force,
                         max_shard_size=max_shard_size, storage_options=_storage_options(),
                         **({} if remote_source else _reader_options(src, from_format, skip_object_arrays)),
                         **options)
    finally:
        close()
    document = _report_json(report)
    if as_json:
        _echo_json({"schema": "varstore.convert/1", **document})
        return
    click.echo(_convert_summary(document))
    if document["renamed"]:
        click.echo(f"renamed {_plural(len(document['renamed']), 'variable')}:")
        for line in fmt.table([[old, "->", new] for old, new in document["renamed"].items()]):
            click.echo("  " + line)
    for note in document["notes"]:
        click.echo(f"note: {note}")
    skipped = document["skipped"]
    if skipped:
        click.echo(f"skipped {_plural(len(skipped), 'entry', 'entries')}:")
        for line in fmt.table([[s["name"], s["reason"]] for s in skipped]):
            click.echo("  " + line)


def _convert_summary(document: dict[str, Any]) -> str:
    return (f"converted {document['source']} ({document['source_format']}) -> {document['destination']} "
            f"({document['destination_format']}): {_plural(document['variables'], 'variable')}, "
            f"{fmt.human_size(document['nbytes'])}")


COMMANDS = [ls_command, show_command, diff_command, verify_command, convert_command]
