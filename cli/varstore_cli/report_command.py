"""varstore report: one self-contained HTML page about a checkpoint, or about what changed between two.

Parses the options, opens CKPT (and OTHER) as the other commands do
(options.open_reader: a CheckpointManager directory means its latest
checkpoint, URLs go to the object store), calls `varstore.report` with
convert's progress bar, and prints where the page went. Never catches
library errors (main.py does): a bad source is one line and exit 2, and the
library leaves no page behind.
"""

from __future__ import annotations

import contextlib

import click

from varstore_cli import formatting as fmt
from varstore_cli.convert_command import make_progress, stderr_is_terminal
from varstore_cli.options import format_option, open_reader, storage_option
from varstore_cli.terminal import echo_line

__all__ = ["report_command"]


@click.command("report")
@click.argument("checkpoint", type=click.Path(readable=False))  # the library names an unreadable path
@click.argument("other", type=click.Path(readable=False), required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, metavar="FILE",
              help="The HTML file to write (replaced if present).")
@click.option("--title", help="The page title (default: the checkpoint's path).")
@click.option("--figures", type=click.IntRange(min=0), default=24, show_default=True, metavar="N",
              help="Draw histogram figures for at most N variables: flagged (NaN/Inf) first, then --figure "
                   "matches, then the largest; the rest show their bin counts.")
@click.option("--figure", "figure_names", multiple=True, metavar="GLOB",
              help="Draw the histogram of the variables matching GLOB (repeatable; within --figures).")
@click.option("--bins", type=click.IntRange(min=1), default=40, show_default=True, metavar="N",
              help="Histogram bins over each variable's [min, max].")
@click.option("--log-counts", is_flag=True, help="Show histograms with a log count axis first (the page toggles).")
@click.option("--rtol", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="R",
              help="With OTHER: an element changed when |a-b| > atol + rtol*max(|a|,|b|).")
@click.option("--atol", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="A",
              help="With OTHER: absolute tolerance.")
@format_option()
@storage_option
def report_command(checkpoint: str, other: str | None, output: str, title: str | None, figures: int,
                   figure_names: tuple[str, ...], bins: int, log_counts: bool, rtol: float, atol: float,
                   format_: str | None) -> None:
    """Write one self-contained HTML page about CHECKPOINT (or, with OTHER, what changed from CHECKPOINT to OTHER).

    The page needs no network: its style, script and figures are inline. It shows
    the format, variable and parameter counts, bytes by dtype, trainable flags,
    metadata and the scope tree; the variables holding NaN/Inf first; and per
    variable shape, dtype, device, statistics and a histogram. With OTHER (read
    as `varstore diff CHECKPOINT OTHER`): the variables added, removed, reshaped
    or retyped, and the relative change ||b-a||/||a|| by variable and by scope.
    --format applies to CHECKPOINT and OTHER alike."""
    from varstore import report  # the report's modules load only for this command

    with contextlib.ExitStack() as stack:
        reader = stack.enter_context(open_reader(checkpoint, format_))
        reader_b = stack.enter_context(open_reader(other, format_)) if other is not None else None
        progress, close = make_progress(enabled=stderr_is_terminal())
        try:
            result = report(reader, reader_b, output, title=title, figures=figures, figure_names=figure_names,
                            bins=bins, log_counts=log_counts, rtol=rtol, atol=atol, progress=progress)
        finally:
            close()
    flagged = f", {fmt.plural(len(result.flagged), 'variable')} with NaN/Inf" if result.flagged else ""
    echo_line(f"wrote {result.path}: {fmt.plural(result.variables, 'variable')}, "
              f"{fmt.plural(len(result.figures), 'figure')}{flagged}, {fmt.human_size(result.nbytes)}")
