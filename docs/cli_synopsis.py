"""Renders the synopsis at the top of docs/cli.md from the click commands themselves, and the format names from the registry.

The block between the two marker comments in docs/cli.md is this script's
output: one usage line per command (its arguments, then every option with its
metavar; `...` after a repeatable one), the group's own options, and the
format names `--format`/`--from` and `--to` accept (varstore.formats.registry).

    python docs/cli_synopsis.py           # rewrite the block in docs/cli.md
    python docs/cli_synopsis.py --check   # exit 1 and print both when it is stale

tests/cli/test_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"
BEGIN = "<!-- synopsis: generated from the click commands by docs/cli_synopsis.py; do not edit by hand -->"
END = "<!-- end of synopsis -->"
WIDTH = 100


def _option(param: object) -> str | None:
    import click

    if not isinstance(param, click.Option) or param.hidden or "--help" in param.opts:
        return None
    name = next((o for o in param.opts if o.startswith("--")), param.opts[0])
    if param.is_flag:
        text = f"[{name}]"
    else:
        metavar = param.metavar or param.type.name.upper().replace(" ", "_")
        text = f"{name} {metavar}" if param.required else f"[{name} {metavar}]"
    return text + ("..." if param.multiple else "")


def _usage(pieces: list[str]) -> list[str]:
    """The pieces joined by spaces, wrapped at WIDTH between pieces (an option stays with its metavar)."""
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + 1 + len(piece) > WIDTH:
            lines.append("    " + piece)
        else:
            lines[-1] += " " + piece
    return lines


def synopsis() -> str:
    """The synopsis block's text (without the code fence), from the commands registered in varstore_cli.main."""
    import click

    from varstore.formats.registry import read_format_names, write_format_names
    from varstore_cli.main import cli

    lines: list[str] = []
    for name, command in cli.commands.items():
        arguments = [p.human_readable_name if p.required else f"[{p.human_readable_name}]"
                     for p in command.params if isinstance(p, click.Argument)]
        options = [text for p in command.params if (text := _option(p)) is not None]
        lines += _usage(["varstore", name, *arguments, *options])
    root = [text for p in cli.params if (text := _option(p)) is not None]
    lines += _usage(["varstore", *root, "[--help]"])
    lines.append("")
    lines += textwrap.wrap(f"read formats (--format, --from): {', '.join(read_format_names())}", WIDTH,
                           subsequent_indent="    ")
    lines += textwrap.wrap(f"written formats (--to): {', '.join(write_format_names())}", WIDTH, subsequent_indent="    ")
    return "\n".join(lines) + "\n"


def render(page: str) -> str:
    """`page` with the block between the markers replaced by a fresh synopsis."""
    head, rest = page.split(BEGIN + "\n", 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n```\n{synopsis()}```\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md's synopsis is stale")
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    fresh = render(page)
    if args.check:
        if fresh != page:
            print("docs/cli.md's synopsis is stale; run python docs/cli_synopsis.py. It should read:")
            print(synopsis())
            return 1
        print("docs/cli.md's synopsis is up to date")
        return 0
    PAGE.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(ROOT / "cli")]
    sys.exit(main())
