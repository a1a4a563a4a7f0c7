"""Runs the examples in docs/cli.md and checks (or rewrites) their output, so the page never goes stale.

Every ```console block of docs/cli.md holds commands ("$ " lines) each followed
by its exact output; a non-zero exit status is shown as a last line
"[exit status N]". Blocks run in order in one scratch directory that holds a
link `fixtures` to the repository's fixtures/ (so files written by one example,
e.g. by `varstore convert`, are there for the next). `varstore ...` lines run
in-process through click's CliRunner (stdout and stderr together, no terminal,
so no progress bar); other lines run with bash in that directory.

    python docs/cli_examples.py           # rewrite docs/cli.md with fresh output
    python docs/cli_examples.py --check   # exit 1 and print a diff when it is stale

tests/cli/test_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"
BLOCK = re.compile(r"^```console\n(.*?)^```$", re.S | re.M)


@contextmanager
def scratch_directory(base: Path | None = None) -> Iterator[Path]:
    """Enters a temporary working directory (under `base`) with `fixtures` linked to the repository's."""
    with tempfile.TemporaryDirectory(prefix="varstore-cli-docs-", dir=base) as tmp:
        work = Path(tmp)
        (work / "fixtures").symlink_to(ROOT / "fixtures", target_is_directory=True)
        previous = Path.cwd()
        os.chdir(work)
        try:
            yield work
        finally:
            os.chdir(previous)


def run_command(command: str) -> str:
    """Output of one example command (stdout + stderr), plus "[exit status N]" when N != 0."""
    argv = shlex.split(command)
    if argv and argv[0] == "varstore":
        from click.testing import CliRunner

        from varstore_cli.main import cli

        result = CliRunner().invoke(cli, argv[1:], prog_name="varstore")
        output, code = result.output, result.exit_code
    else:
        env = dict(os.environ)  # `python` in an example is the interpreter running this script
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env)
        output, code = done.stdout + done.stderr, done.returncode
    text = output.rstrip("\n")
    if code:
        text = (text + "\n" if text else "") + f"[exit status {code}]"
    return text


def _render_block(body: str) -> str:
    out: list[str] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append(line)
            result = run_command(line[2:])
            if result:
                out.append(result)
    return "\n".join(out) + "\n"


def render(page: str) -> str:
    """The page with every console block's outputs replaced by fresh ones (run in the current directory)."""
    return BLOCK.sub(lambda m: "```console\n" + _render_block(m.group(1)) + "```", page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="do not rewrite; exit 1 when the page is stale")
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    with scratch_directory():
        fresh = render(page)
    if fresh == page:
        print(f"{PAGE.relative_to(ROOT)} is up to date")
        return 0
    if args.check:
        sys.stdout.writelines(difflib.unified_diff(page.splitlines(True), fresh.splitlines(True),
                                                   "docs/cli.md", "fresh output"))
        return 1
    PAGE.write_text(fresh, encoding="utf-8")
    print(f"rewrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
