"""Regenerates the two screenshots of docs/report.md from the page's own example.

Runs the ```python block of docs/report.md that follows "<!-- example -->" in a
scratch folder (it writes two checkpoints and the two report pages), opens each
page in headless Chromium through Playwright (Debian's /usr/bin/chromium, or
--chromium PATH) and writes docs/report_single.png and docs/report_diff.png.

    python docs/report_screenshots.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "report.md"
MARKER = "<!-- example -->"
SHOTS = {"single": ROOT / "docs" / "report_single.png", "diff": ROOT / "docs" / "report_diff.png"}


def example_code(page: str) -> str:
    """The ```python block after the example marker of docs/report.md."""
    after = page.split(MARKER, 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def _shrink(path: Path) -> None:
    """Rewrites a screenshot with a 256-colour palette (the pages are flat colours; keeps each PNG small)."""
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium executable")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="varstore-report-docs-") as scratch:
        folder = Path(scratch)
        (folder / "example.py").write_text(example_code(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "cli"),
                                                           os.environ.get("PYTHONPATH", "")])}
        subprocess.run([sys.executable, "example.py"], cwd=folder, env=env, check=True)
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.goto((folder / "report.html").as_uri())
            page.locator("#variables tr.row", has_text="head/kernel").click()  # its statistics and histogram
            page.screenshot(path=str(SHOTS["single"]), full_page=True)
            page.goto((folder / "diff.html").as_uri())
            page.locator("#diff").screenshot(path=str(SHOTS["diff"]))
            browser.close()
    for path in SHOTS.values():
        _shrink(path)
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
