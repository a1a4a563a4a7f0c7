"""The inspection subcommands ls, show, diff, verify, and COMMANDS, every subcommand main.py registers.

Each command parses its options, calls the public library API
(`varstore.open_checkpoint`, `varstore.inspect`), and prints a
table or a versioned JSON document (schemas in docs/cli.md). `convert`
lives in convert_command.py, `report` in report_command.py, the options and
helpers the commands share in options.py. Commands never catch library errors: main.py turns them into
one line and exit status 2.
"""

from __future__ import annotations

import bisect
import difflib
import json
import math
import os
from typing import Any

import click

from varstore import CheckpointReader, VariableInfo
from varstore.errors import CheckpointNotFoundError, NotACheckpointError, UnknownVariableError, VarstoreError
from varstore import diff_checkpoints, scope_tree, variable_stats
from varstore_cli.terminal import echo_line
from varstore_cli import formatting as fmt
from varstore_cli.convert_command import convert_command, make_progress, stderr_is_terminal
from varstore_cli.report_command import report_command
from varstore_cli.options import (echo_json, echo_json_list, format_option, is_url, open_reader, select, selection_json,
                                  selection_options, selection_words, skip_object_arrays_option, storage_option,
                                  storage_options)

__all__ = ["COMMANDS", "ATTRIBUTES_SUFFIX"]

#: Suffix of TF2 object-based checkpoint keys, hidden by `ls --strip-attributes`.
ATTRIBUTES_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _strip(name: str, strip_attributes: bool) -> str:
    if strip_attributes and name.endswith(ATTRIBUTES_SUFFIX):
        return name[: -len(ATTRIBUTES_SUFFIX)]
    return name


def _elements(info: VariableInfo) -> int:
    return math.prod(info.shape)


def _checkpoint_json(reader: CheckpointReader) -> dict[str, Any]:
    document = {
        "path": reader.location,
        "format": reader.format,
        "format_version": reader.format_version,
        "step": reader.step,
        "metadata": reader.metadata,
    }
    section = _distributed(reader)
    if section is not None:
        document["written_by_ranks"] = section.get("world_size")
        document["partitioned"] = {name: [part.get("name") for part in entry.get("parts") or []]
                                   for name, entry in (section.get("arrays") or {}).items() if entry.get("parts")}
    return document


def _distributed(reader: CheckpointReader) -> dict[str, Any] | None:
    """The "distributed" section of a varstore checkpoint saved collectively (or with partitioned variables)."""
    section = getattr(reader, "distributed", None)
    return section if isinstance(section, dict) else None


def _partition_lines(reader: CheckpointReader, names: set[str]) -> list[str]:
    section = _distributed(reader)
    if section is None:
        return []
    lines = []
    for name, entry in sorted((section.get("arrays") or {}).items()):
        parts = entry.get("parts") or []
        if parts and name in names:
            writers = sorted({w.get("rank") for w in entry.get("writes") or []})
            lines.append(f"{name}: partitioned variable, one array from {fmt.plural(len(parts), 'part')} "
                         f"({parts[0].get('name')} ...), written by {fmt.plural(len(writers), 'rank')}")
    return lines


def _describe(reader: CheckpointReader) -> str:
    parts = [reader.format]
    if reader.format_version is not None:
        parts.append(f"version {reader.format_version}")
    if reader.step is not None:
        parts.append(f"step {reader.step}")
    section = _distributed(reader)
    if section is not None and isinstance(section.get("world_size"), int):
        parts.append(f"written by {fmt.plural(section['world_size'], 'rank')}")
    return f"{reader.location}  ({', '.join(parts)})"


#: Up to this many names a missing name is compared with every one; past it with its _NEAR neighbours on
#: each side in sort order and in reversed-text order (a hint costs O(_NEAR), not one comparison per name).
_ALL_COMPARED = 2000
_NEAR = 200


def _near(name: str, keys: list[str]) -> list[str]:
    """The names a did-you-mean hint compares `name` with (as the library's restore hints do)."""
    if len(keys) <= _ALL_COMPARED:
        return keys
    found: dict[str, None] = {}
    for ordered, key, flip in ((sorted(keys), name, False), (sorted(k[::-1] for k in keys), name[::-1], True)):
        at = bisect.bisect_left(ordered, key)
        found.update((k[::-1] if flip else k, None) for k in ordered[max(0, at - _NEAR):at + _NEAR])
    return list(found)


def _resolve_names(reader: CheckpointReader, name: str) -> tuple[list[str], str | None]:
    """([name] itself, or its TF2 key with the attribute suffix), None; or for a scope (`conv1`, `conv1/`)
    every key in it and the scope; or an error with suggestions."""
    keys = reader.keys()
    if name in keys:
        return [name], None
    if name + ATTRIBUTES_SUFFIX in keys:
        return [name + ATTRIBUTES_SUFFIX], None
    scope = name.rstrip("/")
    inside = [key for key in keys if key.startswith(scope + "/")] if scope else []
    if inside:  # `conv1` and `conv1/` alike: a scope, every variable of it shown
        return inside, scope
    close = difflib.get_close_matches(name, _near(name, keys), n=3)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownVariableError(
        f"no variable '{name}' in '{reader.location}' ({reader.format}, {fmt.plural(len(keys), 'variable')}); "
        f"{hint}`varstore ls {reader.location}` lists them")


# ----------------------------------------------------------------------- ls
@click.command("ls")
@click.argument("path", type=click.Path(readable=False))  # the library names an unreadable path
@selection_options("")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.ls/1 JSON document.")
@click.option("--tree", is_flag=True, help="Show the scope tree with per-scope totals.")
@click.option("--strip-attributes", is_flag=True,
              help=f"Show TF2 object-checkpoint keys without '{ATTRIBUTES_SUFFIX}'.")
@format_option()
@click.option("--checkpoints", "list_checkpoints", is_flag=True,
              help="PATH is a CheckpointManager directory: list its checkpoints (step, time, size; latest marked).")
@skip_object_arrays_option
@storage_option
def ls_command(path: str, patterns: tuple[str, ...], excludes: tuple[str, ...], as_json: bool, tree: bool,
               strip_attributes: bool,
               format_: str | None, list_checkpoints: bool, skip_object_arrays: bool) -> None:
    """List the variables of a checkpoint.

    One line per variable of PATH: name, shape, dtype, size, trainable flag and
    collections; then totals, and the entries that are not variables with the
    reason they were skipped. PATH may be a CheckpointManager directory (its
    latest checkpoint); with --checkpoints, its checkpoints are listed instead."""
    if list_checkpoints:
        _list_checkpoints(path, as_json)
        return
    if format_ is None and not patterns and not excludes and not tree and _list_steps(path, as_json):
        return
    try:
        opened = open_reader(path, format_, skip_object_arrays)
    except NotACheckpointError:  # a folder that holds checkpoints rather than being one
        if format_ is not None or is_url(path) or not os.path.isdir(path) or not _list_folder(path, as_json):
            raise
        return
    with opened as reader:
        infos = reader.infos()
        if patterns or excludes:
            infos = [i for i in infos if _selected(i.name, _strip(i.name, strip_attributes), patterns, excludes)]
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
                                        **selection_json(patterns, excludes), "variables": variables,
                                        "totals": totals,
                                        "skipped": [{"name": s.name, "reason": s.reason}
                                                    for s in reader.skipped]}
            if tree:
                document["tree"] = scope_tree(shown).to_json()
            echo_json(document)
            return
        echo_line(_describe(reader))
        if tree:
            lines = fmt.tree_lines(scope_tree(shown), label=".")
        else:
            rows = [[i.name, fmt.format_shape(i.shape), i.dtype, fmt.human_size(i.nbytes),
                     fmt.format_flag(i.trainable), fmt.format_collections(i.collections)] for i in shown]
            lines = fmt.table(rows, ["name", "shape", "dtype", "size", "trainable", "collections"],
                              right=(3,)) if rows else []
        for line in lines:
            echo_line(line)
        selected = selection_words(patterns, excludes)
        echo_line(f"total: {fmt.plural(totals['variables'], 'variable')}{selected}, "
                   f"{fmt.plural(totals['elements'], 'element')}, {fmt.human_size(totals['nbytes'])}")
        for line in _partition_lines(reader, {i.name for i in infos}):
            echo_line(line)
        if reader.skipped:
            echo_line(f"skipped {fmt.plural(len(reader.skipped), 'entry', 'entries')}:")
            for line in fmt.table([[s.name, s.reason] for s in reader.skipped]):
                echo_line("  " + line)


def _list_steps(path: str, as_json: bool) -> bool:
    """Lists the kept steps of an incremental checkpoint repository (one row each, with the bytes it added);
    False, printing nothing, when `path` is not one (`DIR@ckpt-<step>` is one step: listed as a checkpoint)."""
    from varstore import incremental_steps

    steps = incremental_steps(path, storage_options()) if not is_url(path) else None
    if steps is None:
        return False
    if as_json:
        echo_json({"schema": "varstore.steps/1", "repository": path,
                   "steps": [{"location": s.location, "step": s.step, "snapshot_id": s.snapshot_id, "time": s.time,
                              "added_bytes": s.added_bytes, "total_bytes": s.total_bytes} for s in steps]})
        return True
    echo_line(f"{path}  (incremental checkpoint repository, Icechunk)")
    rows = [[s.location, f"{s.step:,}", fmt.human_size(s.added_bytes), fmt.human_size(s.total_bytes)] for s in steps]
    for line in fmt.table(rows, ["checkpoint", "step", "added", "size"], right=(1, 2, 3)):
        echo_line(line.rstrip())
    echo_line(f"total: {fmt.plural(len(steps), 'step')}, {fmt.human_size(sum(s.added_bytes for s in steps))} added")
    return True


def _selected(key: str, shown: str, patterns: tuple[str, ...], excludes: tuple[str, ...]) -> bool:
    """Kept by --filter / --exclude: its key or its shown name matches a --filter, and neither an --exclude."""
    return (bool(select([key], patterns, ()) or select([shown], patterns, ()))
            and bool(select([key], (), excludes) and select([shown], (), excludes)))


def _list_folder(path: str, as_json: bool) -> bool:
    """Lists what is directly in folder `path`: each checkpoint with its format (a manager directory's latest),
    told by content as `ls FILE` does (the registry's detectors, never a suffix alone), and every other entry
    as "not a checkpoint" with the reason.

    Returns False, printing nothing, when the folder holds no checkpoint.
    """
    from varstore import detect_format, is_manager_directory, latest_checkpoint

    entries: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        where = os.path.join(path, entry.name)
        try:
            kind = detect_format(entry.path, by_suffix=False)
        except (VarstoreError, OSError) as err:
            if not entry.is_dir() or not is_manager_directory(entry.path):
                reason = str(err)
                marker = f"'{entry.path}' is not a checkpoint: "
                others.append({"name": entry.name, "path": where,
                               "reason": reason[len(marker):] if reason.startswith(marker) else reason})
                continue
            latest = latest_checkpoint(entry.path)
            kind = f"manager directory, latest {os.path.basename(str(latest))}" if latest else "manager directory"
        entries.append({"name": entry.name, "path": where, "format": kind})
    if not entries:
        return False
    if as_json:
        echo_json({"schema": "varstore.folder/1", "directory": path, "checkpoints": entries,
                   "not_checkpoints": others})
        return True
    echo_line(f"{path}: a folder of {fmt.plural(len(entries), 'checkpoint')} "
               f"(`varstore ls {os.path.join(path, '<name>')}` lists one)")
    rows = sorted([[e["name"], e["format"]] for e in entries]
                  + [[o["name"], f"not a checkpoint: {o['reason']}"] for o in others])
    for line in fmt.table(rows, ["name", "format"]):
        echo_line(line.rstrip())
    return True


def _list_checkpoints(path: str, as_json: bool) -> None:
    from varstore import is_manager_directory, list_checkpoints

    if not is_manager_directory(path, storage_options()):
        raise CheckpointNotFoundError(
            f"'{path}' is not a CheckpointManager directory (no 'latest' pointer and no "
            f"'<name>-<step>.h5' or '.zarr' entries); --checkpoints lists a manager directory")
    found = list_checkpoints(path, storage_options())
    if as_json:
        echo_json({"schema": "varstore.checkpoints/1", "directory": path,
                    "checkpoints": [{"path": str(c.path), "step": c.step, "created_utc": c.created_utc,
                                     "nbytes": c.nbytes, "latest": c.latest} for c in found]})
        return
    rows = [[os.path.basename(str(c.path)), f"{c.step:,}", c.created_utc[:19].replace("T", " "), fmt.human_size(c.nbytes),
             "latest" if c.latest else ""] for c in found]
    for line in fmt.table(rows, ["checkpoint", "step", "created (UTC)", "size", ""], right=(1, 3)):
        echo_line(line.rstrip())
    echo_line(f"total: {fmt.plural(len(found), 'checkpoint')}, "
               f"{fmt.human_size(sum(c.nbytes for c in found))}")


# --------------------------------------------------------------------- show
@click.command("show")
@click.argument("path", type=click.Path(readable=False))  # the library names an unreadable path
@click.argument("name")
@click.option("--values", "count", type=click.IntRange(min=0), default=10, show_default=True, metavar="N",
              help="Print the first N values (in C order); 0 prints none.")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.show/1 JSON document.")
@format_option()
@skip_object_arrays_option
@storage_option
def show_command(path: str, name: str, count: int, as_json: bool, format_: str | None,
                 skip_object_arrays: bool) -> None:
    """Show one variable, or every variable of a scope: metadata, statistics, first values.

    Statistics are min, max, mean, std (over the finite elements) and the
    counts of NaN, inf and zero elements. NAME may be a scope ('conv1'): each
    of its variables is shown, one block after another under a one-line
    header (--json: a list of documents)."""
    with open_reader(path, format_, skip_object_arrays) as reader:
        keys, scope = _resolve_names(reader, name)
        if as_json:
            documents = [_show_json(reader, key, count) for key in keys]
            if scope is None:
                echo_json(documents[0])
            else:
                echo_json_list(documents)
            return
        if scope is not None:
            echo_line(f"scope {scope}: {fmt.plural(len(keys), 'variable')} in {_describe(reader)}")
        for key in keys:
            if scope is not None:
                echo_line("")
            for line in fmt.table(_show_rows(reader, key, count)):  # the block `show CKPT conv1/w` prints
                echo_line(line)


def _show_json(reader: CheckpointReader, key: str, count: int) -> dict[str, Any]:
    """The varstore.show/1 document of one variable (its first `count` values)."""
    info = reader.info(key)
    value = reader.read(key)
    stats = variable_stats(value)
    return {"schema": "varstore.show/1", **_checkpoint_json(reader),
            "variable": {**info.to_json(), "attributes": info.attributes},
            "stats": stats.to_json(), "values": fmt.json_values(value.reshape(-1)[:count])}


def _show_rows(reader: CheckpointReader, key: str, count: int) -> list[list[str]]:
    """The rows `show` prints for one variable: metadata, attributes, statistics, first `count` values."""
    info = reader.info(key)
    value = reader.read(key)
    stats = variable_stats(value)
    first = value.reshape(-1)[:count]
    rows = [
        ["name", info.name],
        ["checkpoint", _describe(reader)],
        ["shape", fmt.format_shape(info.shape)],
        ["dtype", info.dtype],
        ["size", f"{fmt.human_size(info.nbytes)} ({fmt.plural(stats.count, 'element')})"],
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
    return rows


# --------------------------------------------------------------------- diff
@click.command("diff")
@click.argument("a", type=click.Path(readable=False))  # the library names an unreadable path
@click.argument("b", type=click.Path(readable=False))  # the library names an unreadable path
@click.option("--rtol", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="R",
              help="Relative tolerance: equal when |a-b| <= atol + rtol*max(|a|,|b|).")
@click.option("--atol", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="A",
              help="Absolute tolerance.")
@selection_options("")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.diff/1 JSON document.")
@storage_option
@click.pass_context
def diff_command(ctx: click.Context, a: str, b: str, rtol: float, atol: float, patterns: tuple[str, ...],
                 excludes: tuple[str, ...], as_json: bool) -> None:
    """Compare two checkpoints name by name.

    Lists the variables added, removed, with changed shape or dtype, and those
    whose values differ. Exit status 0 when equal, 1 when they differ, 2 on
    error (as diff(1))."""
    with open_reader(a) as reader_a, open_reader(b) as reader_b:
        progress, close = make_progress(enabled=not as_json and stderr_is_terminal())
        try:
            names = (select(reader_a.keys() + reader_b.keys(), patterns, excludes)
                     if patterns or excludes else None)
            result = diff_checkpoints(reader_a, reader_b, rtol=rtol, atol=atol, names=names, progress=progress)
        finally:
            close()
        if as_json:
            echo_json({"schema": "varstore.diff/1", "a": _checkpoint_json(reader_a),
                        "b": _checkpoint_json(reader_b), **selection_json(patterns, excludes), **result.to_json()})
        else:
            echo_line(f"--- {_describe(reader_a)}")
            echo_line(f"+++ {_describe(reader_b)}")
            rows = [["added", n, _brief(reader_b.info(n))] for n in result.added]
            rows += [["removed", n, _brief(reader_a.info(n))] for n in result.removed]
            rows += [["shape", c.name, f"{fmt.format_shape(c.shape_a)} -> {fmt.format_shape(c.shape_b)}"]
                     for c in result.shape_changed]
            rows += [["dtype", c.name, f"{c.dtype_a} -> {c.dtype_b}"] for c in result.dtype_changed]
            for d in result.values_differ:
                detail = (f"{d.mismatched:,} of {fmt.plural(d.count, 'element')} "
                          f"{'differs' if d.mismatched == 1 else 'differ'}")
                if d.max_abs_diff is not None:
                    detail += (f", max abs diff {fmt.format_number(d.max_abs_diff)}"
                               f", max rel diff {fmt.format_number(d.max_rel_diff)}")
                rows.append(["values", d.name, detail])
            for line in fmt.table(rows):
                echo_line(line)
            summary = [f"{len(result.equal):,} equal", f"{len(result.added):,} added",
                       f"{len(result.removed):,} removed", f"{len(result.shape_changed):,} shape changed",
                       f"{len(result.dtype_changed):,} dtype changed",
                       f"{len(result.values_differ):,} values differ"]
            tolerance = f" (rtol {rtol:g}, atol {atol:g})" if rtol or atol else " (exact)"
            verdict = "checkpoints differ" if result.differs else "checkpoints are equal"
            echo_line(f"{verdict}{tolerance}{selection_words(patterns, excludes)}: {', '.join(summary)}")
    ctx.exit(1 if result.differs else 0)


def _brief(info: VariableInfo) -> str:
    return f"{fmt.format_shape(info.shape)} {info.dtype}"


# ------------------------------------------------------------------- verify
@click.command("verify")
@click.argument("path", type=click.Path(readable=False))  # the library names an unreadable path
@format_option()
@selection_options("")
@click.option("--json", "as_json", is_flag=True, help="Print the varstore.verify/1 JSON document.")
@skip_object_arrays_option
@storage_option
def verify_command(path: str, format_: str | None, patterns: tuple[str, ...], excludes: tuple[str, ...],
                   as_json: bool, skip_object_arrays: bool) -> None:
    """Check a checkpoint's structure and checksums.

    Reads every variable of PATH and checks every checksum the format records.
    Exit status 0 when all is well; 2 with the first bad variable named. An incremental
    checkpoint repository (CheckpointManager(format="icechunk")) has every kept step checked."""
    steps = None
    if format_ is None and not is_url(path):
        from varstore import incremental_steps

        steps = incremental_steps(path, storage_options())
    for step in steps or []:
        _verify_one(step.location, None, patterns, excludes, as_json, skip_object_arrays)
    if steps is None:
        _verify_one(path, format_, patterns, excludes, as_json, skip_object_arrays)


def _verify_one(path: str, format_: str | None, patterns: tuple[str, ...], excludes: tuple[str, ...],
                as_json: bool, skip_object_arrays: bool) -> None:
    with open_reader(path, format_, skip_object_arrays) as reader:
        names = select(reader.keys(), patterns, excludes) if patterns or excludes else None
        infos = reader.infos() if names is None else [reader.info(name) for name in names]
        progress, close = make_progress(enabled=not as_json and stderr_is_terminal())
        try:
            if names is not None:
                reader.verify(progress, names)
            else:
                reader.verify(progress) if progress is not None else reader.verify()
        finally:
            close()
        checked = sum(1 for i in infos if i.checksum is not None)
        total = sum(i.nbytes for i in infos)
        if as_json:
            echo_json({"schema": "varstore.verify/1", **_checkpoint_json(reader),
                       **({} if names is None else selection_json(patterns, excludes)), "ok": True,
                        "variables": len(infos), "nbytes": total, "checksums": checked})
            return
        how = (f"{fmt.plural(checked, 'checksum')} matched" if checked
               else "no checksums recorded; every variable read back")
        selected = selection_words(patterns, excludes)
        echo_line(f"ok: {_describe(reader)}: {fmt.plural(len(infos), 'variable')}{selected}, "
                   f"{fmt.human_size(total)}, {how}")


COMMANDS = [ls_command, show_command, diff_command, verify_command, convert_command, report_command]
