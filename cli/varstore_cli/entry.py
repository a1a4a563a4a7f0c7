"""The `varstore` console entry point: Ctrl-C handled from the first line, before any heavy import.

Importing the command line (click, numpy, the library) takes most of a second; a SIGINT
then must not print a KeyboardInterrupt traceback. `main` installs a SIGINT handler that
ends the process at once with "varstore: interrupted" and exit status 130 while it imports,
then restores Python's own handler so that a running command unwinds (temporaries removed)
and main.py prints the same line; once the command is over, a late SIGINT is ignored (the
process is only exiting). Nothing else here: commands live in commands.py.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

__all__ = ["main", "EXIT_INTERRUPTED", "INTERRUPTED"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
INTERRUPTED = "varstore: interrupted\n"


def _interrupted_while_starting(_signum: int, _frame: FrameType | None) -> None:
    """While importing there is nothing to clean up: say so and leave at once (no traceback, no unwinding)."""
    os.write(2, INTERRUPTED.encode())
    os._exit(EXIT_INTERRUPTED)


def main(argv: list[str] | None = None) -> None:
    """Runs the `varstore` command (argv: the arguments, default sys.argv[1:]); exits 130 on Ctrl-C at any moment."""
    previous = signal.signal(signal.SIGINT, _interrupted_while_starting)
    try:
        from varstore_cli.main import cli
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        cli(args=argv, prog_name="varstore")
    except KeyboardInterrupt:  # outside a command's invoke (click's own parsing): still one line
        sys.stderr.write(INTERRUPTED)
        sys.exit(EXIT_INTERRUPTED)
    finally:  # the command is over (its output written): a Ctrl-C while Python shuts down changes nothing
        signal.signal(signal.SIGINT, signal.SIG_IGN)
