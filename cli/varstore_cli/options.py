"""What the subcommands share: the --format, --skip-object-arrays and --storage-option options, opening PATH, printing a JSON document.

`open_reader` opens a checkpoint through the library (a CheckpointManager
directory means its latest checkpoint); `echo_json` prints the versioned
JSON documents of docs/cli.md. Defines no command and catches no library
error (main.py turns them into exit codes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from varstore_cli.terminal import escape_json_text
from varstore import CheckpointReader
from varstore.errors import CheckpointNotFoundError

__all__ = [
    "FormatOption",
    "echo_json",
    "echo_json_list",
    "format_option",
    "is_url",
    "open_reader",
    "read_format_help",
    "reader_options",
    "select",
    "selection_json",
    "selection_options",
    "selection_words",
    "resolve_path",
    "skip_object_arrays_option",
    "storage_option",
    "storage_options",
    "with_latest_on_a_bucket",
    "write_format_help",
]

STORAGE_OPTION_HELP = ("For s3://, gs://, az:// paths: a client setting KEY=VALUE (endpoint, region, "
                       "access_key_id, ...; repeatable). Settings also come from AWS_*, GOOGLE_*, AZURE_STORAGE_*.")


def read_format_help() -> str:
    from varstore import read_format_names

    return f"Read PATH as this format instead of detecting it: {', '.join(read_format_names())}."


def write_format_help() -> str:
    from varstore import write_format_names

    return f"Destination format (default: from DST's suffix): {', '.join(write_format_names())}."


class FormatOption(click.Option):
    """An option whose help lists the formats registered when help is shown (varstore.formats.registry)."""

    def __init__(self, *args: Any, help_text: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._help_text = help_text

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = self._help_text()
        return super().get_help_record(ctx)


def format_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--format", "format_", metavar="F", cls=FormatOption, help_text=read_format_help)


def resolve_path(path: str) -> str:
    """PATH as given, or for a CheckpointManager directory its latest checkpoint (tf.train.latest_checkpoint).

    A directory on an object store (s3://bucket/runs/b2) is resolved the same way.

    Raises:
      CheckpointNotFoundError: a manager directory without checkpoints.
    """
    from varstore import is_manager_directory, latest_checkpoint

    if is_url(path):  # asked only once nothing is committed at the URL itself (see open_reader)
        remote = latest_checkpoint(path, storage_options())
        return path if remote is None else str(remote)
    if not is_manager_directory(path):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise CheckpointNotFoundError(f"'{path}' is a CheckpointManager directory without checkpoints")
    return str(latest)


def with_latest_on_a_bucket(url: str, call: Callable[[str], Any]) -> Any:
    """call(url); when nothing is committed at `url` but it is a CheckpointManager directory on an object store
    (s3://bucket/runs/b2), call(its latest checkpoint) instead, as resolve_path does for a local directory.

    A checkpoint URL costs no request more; only a miss looks for the manager's "latest" pointer.

    Raises:
      CheckpointNotFoundError: nothing at `url`, and it is no manager directory with checkpoints.
    """
    try:
        return call(url)
    except CheckpointNotFoundError:
        latest = resolve_path(url)
        if latest == url:
            raise
    return call(latest)


def reader_options(path: str, format: str | None, skip_object_arrays: bool) -> dict[str, Any]:
    """open_checkpoint options: skip_object_arrays only where the format's reader takes it (its registry entry)."""
    if not skip_object_arrays:
        return {}
    from varstore import detect_format, format_entry

    entry = format_entry(format or detect_format(path))
    return {"skip_object_arrays": True} if "skip_object_arrays" in entry.read_options else {}


def _remember_storage_options(ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> None:
    if values:
        from varstore import parse_storage_options

        root = ctx.find_root()
        root.ensure_object(dict)
        merged = dict(root.obj.get("storage_options") or {})
        try:
            merged.update(parse_storage_options(values))
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="'--storage-option'") from err
        root.obj["storage_options"] = merged


def storage_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --storage-option KEY=VALUE (repeatable; also before the command) for the URLs a command opens."""
    return click.option("--storage-option", "storage_options", metavar="KEY=VALUE", multiple=True,
                        expose_value=False, callback=_remember_storage_options,
                        help=STORAGE_OPTION_HELP)(command)


def storage_options() -> dict[str, str] | None:
    """The --storage-option settings given so far (None when there are none)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    return (ctx.find_root().obj or {}).get("storage_options") or None


def is_url(path: str) -> bool:
    """True when PATH is an object-store URL (s3://, gs://, az://)."""
    from varstore import is_url as is_remote

    return is_remote(path)


def open_reader(path: str, format: str | None = None, skip_object_arrays: bool = False) -> CheckpointReader:
    from varstore import open_checkpoint  # the converters are imported only when needed

    if is_url(path):
        return with_latest_on_a_bucket(path, lambda where: open_checkpoint(where, format=format,
                                                                           storage_options=storage_options()))
    path = resolve_path(path)
    return open_checkpoint(path, format=format, **reader_options(path, format, skip_object_arrays))


def selection_options(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds --filter GLOB and --exclude GLOB, both repeatable (values `patterns`, `excludes`: tuples).

    `what` qualifies the names in the help ("source " for convert, "" elsewhere). The rule (union of --filter, minus every --exclude)
    is the library's one (CheckpointReader.filter / select_names).
    """
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option("--exclude", "excludes", metavar="GLOB", multiple=True,
                               help=f"Leave out {what}names matching this shell glob (repeatable; applied after "
                                    f"--filter).")(
            command)
        return click.option("--filter", "patterns", metavar="GLOB", multiple=True,
                            help=f"Only {what}names matching this shell glob ('encoder/*'; repeatable: a name "
                                 f"matching any is kept).")(command)
    return decorate


def select(names: Any, patterns: tuple[str, ...], excludes: tuple[str, ...]) -> list[str]:
    """The names --filter / --exclude keep, in order (varstore.select_names)."""
    from varstore import select_names

    return select_names(names, patterns, excludes)


def selection_json(patterns: tuple[str, ...], excludes: tuple[str, ...]) -> dict[str, Any]:
    """The "filter" (null, the one glob, or a list of several) and "exclude" (a list) fields of a JSON document."""
    return {"filter": None if not patterns else patterns[0] if len(patterns) == 1 else list(patterns),
            "exclude": list(excludes)}


def selection_words(patterns: tuple[str, ...], excludes: tuple[str, ...]) -> str:
    """" matching 'a*' or 'b*', excluding 'c*'" for a totals line ("" without a selection)."""
    text = f" matching {' or '.join(repr(p) for p in patterns)}" if patterns else ""
    return text + (f", excluding {' or '.join(repr(p) for p in excludes)}" if excludes else "")


def skip_object_arrays_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--skip-object-arrays", is_flag=True,
                        help="npz: skip members holding object arrays (never unpickled) instead of refusing "
                             "the file.")(function)


def _compact(value: Any) -> str:
    # allow_nan=False: the schemas spell non-finite numbers as strings, so a NaN here is a bug
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def echo_json(document: dict[str, Any]) -> None:
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
    click.echo(escape_json_text("\n".join(lines)))


def echo_json_list(documents: list[dict[str, Any]]) -> None:
    """Prints a JSON list of documents, one document per line (`show CKPT SCOPE --json`)."""
    lines = ["["] + [f"  {_compact(d)}{',' if i < len(documents) - 1 else ''}" for i, d in enumerate(documents)] + ["]"]
    click.echo(escape_json_text("\n".join(lines)))
