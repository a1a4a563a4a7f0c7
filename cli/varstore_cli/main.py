"""The `varstore` command: the click group, global options, and the one error -> exit-code bridge.

Every library error (VarstoreError), every OSError (a missing path, a
permission problem) and every ValueError (an argument the library rejects)
leaving a command becomes ONE line
"varstore: error: <message>" on stderr, escaped for a terminal (terminal.py; click's
own usage errors too, since they repeat the argument given), in command-line words (words.py:
`--force` where the library says `overwrite=True`) and exit status 2, here and nowhere
else; `--debug` (or VARSTORE_DEBUG=1) prints the traceback first. Commands
themselves live in commands.py and never catch library errors.

Exit statuses: 0 success; 1 `diff` found differences (as diff(1)); 2 any
error, including usage errors (click's own); 130 interrupted; 141 stdout
closed early (`| head`), silently.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import click

from varstore import __version__
from varstore.errors import VarstoreError
from varstore_cli.terminal import echo_line, escape_for_terminal
from varstore_cli import commands, options
from varstore_cli.words import cli_words

__all__ = ["cli", "error_message", "EXIT_OK", "EXIT_DIFFER", "EXIT_ERROR"]

EXIT_OK = 0
EXIT_DIFFER = 1
EXIT_ERROR = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a reader that went away


def error_message(err: BaseException) -> str:
    """The one-line message shown for an error (newlines folded, OSErrors with their path escaped).

    A VarstoreError's message is kept whole: a newline in it comes from a name or
    path in a file and is shown as \\x0a by the bridge's escape, not folded into
    a space that would hide it.
    """
    if isinstance(err, VarstoreError):
        return str(err) or type(err).__name__
    if isinstance(err, OSError) and err.strerror:
        where = f"'{escape_for_terminal(str(err.filename))}'" if err.filename is not None else ""
        text = f"{where}: {err.strerror}" if where else err.strerror
        if err.filename2 is not None:
            text += f" (and '{escape_for_terminal(str(err.filename2))}')"
    else:
        text = str(err) or type(err).__name__
    return " ".join(part.strip() for part in text.splitlines() if part.strip()) or type(err).__name__


class _CommandError(click.ClickException):
    """A library error on its way to stderr: one line, exit 2."""

    exit_code = EXIT_ERROR

    def show(self, file: Any = None) -> None:
        echo_line(f"varstore: error: {self.message}", err=True)  # names and paths from files, escaped


class _Group(click.Group):
    """click.Group whose invoke() is the single place errors become exit codes."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as err:  # a usage error of the group's own options
            raise _escaped(err)

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The docstring, then every format read and written, from the format registry (never a list by hand)."""
        super().format_help_text(ctx, formatter)
        from varstore import read_format_names, write_format_names

        with formatter.section("Formats (detected when reading; --format/--from and --to name them)"):
            formatter.write_dl([("read", ", ".join(read_format_names())),
                                ("written", ", ".join(write_format_names()))])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except click.ClickException as err:  # click's usage errors repeat the argument given: escape it too
            raise _escaped(err)
        except BrokenPipeError:  # `varstore ls big.h5 | head`: stop quietly, as if killed by SIGPIPE
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
            ctx.exit(EXIT_BROKEN_PIPE)
        except (VarstoreError, OSError, ValueError) as err:  # ValueError: a bad argument value
            _maybe_traceback(ctx)
            raise _CommandError(cli_words(error_message(err))) from err
        except KeyboardInterrupt:
            click.echo("varstore: interrupted", err=True)
            ctx.exit(130)
        except Exception as err:  # a bug, not bad input: still one line unless --debug
            _maybe_traceback(ctx)
            raise _CommandError(
                f"internal error: {type(err).__name__}: {error_message(err)} "
                f"(please report it; run with --debug for the traceback)") from err


def _escaped(err: click.ClickException) -> click.ClickException:
    """`err` with its message escaped for a terminal (a usage error repeats an argument, maybe a name)."""
    # click types `message` Final, but nothing has read it yet: show() runs after this returns
    err.message = escape_for_terminal(err.message)  # type: ignore[misc]
    return err


def _maybe_traceback(ctx: click.Context) -> None:
    debug = bool((ctx.obj or {}).get("debug")) or os.environ.get("VARSTORE_DEBUG") == "1"
    if debug:
        traceback.print_exc(file=sys.stderr)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="varstore")
@click.option("--debug", is_flag=True, help="Show the Python traceback of an error.")
@options.storage_option
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """List, show, diff, verify and convert checkpoints of every format below.

    Every PATH may also be an object-store URL (s3://bucket/key, gs://, az://);
    client settings come from AWS_*, GOOGLE_*, AZURE_STORAGE_* or --storage-option.

    Exit status: 0 success, 1 `diff` found differences, 2 error.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


for _command in commands.COMMANDS:
    cli.add_command(_command)


if __name__ == "__main__":  # pragma: no cover
    cli()
