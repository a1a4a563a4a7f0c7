"""The report pages in a real browser: headless Chromium driven by Playwright (skipped where either is missing).

Each page is opened from its file with every request routed: anything but the
page's own file: URL or a data: URL fails the test. Asserts no console error,
no dialog (an escaped `<script>` name stays text), every variable name
visible, the NaN/Inf flags, the diff's added / removed / relative-change
values, and writes a screenshot under the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import varstore

from tests.report.conftest import HOSTILE, page_data, values_a, values_b

playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


def _chromium() -> str | None:
    for candidate in (os.environ.get("VARSTORE_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium (apt-get install chromium)")
    with playwright_api.sync_playwright() as driver:
        try:
            launched = driver.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        except Exception as err:  # noqa: BLE001 - any launch failure means "no browser here"
            pytest.skip(f"Chromium at {executable} does not start: {err}")
        yield launched
        launched.close()


class Opened:
    """One page opened in the browser with its console errors, dialogs and refused requests recorded."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.refused: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        own = path.resolve().as_uri()
        self.page.route("**/*", self._route(own))
        self.page.goto(own)
        self.page.wait_for_load_state("load")

    def _route(self, own: str) -> Any:
        def handle(route: Any) -> None:
            url = route.request.url
            if url == own or url.startswith("data:"):
                route.continue_()
            else:
                self.refused.append(url)
                route.abort()
        return handle

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).inner_text())

    def check_clean(self) -> None:
        assert self.errors == [] and self.dialogs == [] and self.refused == []


@pytest.fixture(scope="module")
def pages(single: tuple[Path, Any], diff: tuple[Path, Any]) -> dict[str, Path]:
    return {"single": single[0], "diff": diff[0]}


def test_single_page_shows_every_name_and_the_flags(browser: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    opened = Opened(browser, pages["single"])
    table = opened.text("#variables")
    for name in values_b():
        assert name in table
    flags = opened.text("#flags")
    assert "1 variable with NaN/Inf" in flags and "encoder/dense/kernel: 1 NaN, 1 Inf of 3,072" in flags
    assert opened.page.locator("#variables tr.bad").count() == 1
    assert opened.page.locator("#figures img[src^='data:image/svg+xml']").count() == 2
    opened.page.locator("#variables tr.row", has_text="encoder/dense/kernel").click()
    detail = opened.page.locator("#variables tr.detail")
    assert "NaN 1   Inf 1" in detail.inner_text()
    image = detail.locator("img")
    linear = image.get_attribute("src")
    opened.page.locator("#log-counts").check()
    assert image.get_attribute("src") != linear and image.get_attribute("src").startswith("data:image/svg+xml")
    shot = tmp_path / "single.png"
    opened.page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    opened.check_clean()
    opened.page.close()


def test_diff_page_shows_added_removed_and_relative_change(browser: Any, pages: dict[str, Path], tmp_path: Path) -> None:
    opened = Opened(browser, pages["diff"])
    rows = {r[0]: r for r in page_data(pages["diff"])["diff"]["changed"]}
    relative = rows["encoder/dense/kernel"][1]
    a, b = values_a()["encoder/dense/kernel"].astype(np.float64), values_b()["encoder/dense/kernel"].astype(np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    assert relative == pytest.approx(np.linalg.norm((b - a)[both]) / np.linalg.norm(a))
    changed = opened.text("#changed")
    assert f"encoder/dense/kernel\t{float(f'{relative:.6g}')!r}\t1\t1.628 %\t50\t2" in changed
    assert "decoder/new\t(2, 3)\tfloat32" in opened.text("#added")
    assert "decoder/old\t(5,)\tfloat32" in opened.text("#removed")
    assert "decoder/out/kernel\t(8, 4)\t(4, 8)\tfloat64\tfloat64" in opened.text("#retyped")
    assert "NaN/Inf appeared since A in 1 variable" in opened.text("#flags")
    assert HOSTILE in changed
    assert opened.page.locator("#scope-chart").evaluate("img => img.naturalWidth") > 0
    shot = tmp_path / "diff.png"
    opened.page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    opened.check_clean()
    opened.page.close()


def test_a_long_table_pages_and_filters(browser: Any, tmp_path: Path) -> None:
    names = [f"layer_{i:03d}/w" for i in range(120)]
    varstore.save(tmp_path / "many.h5", {name: np.full(2, i, np.float32) for i, name in enumerate(names)})
    varstore.report(tmp_path / "many.h5", output=tmp_path / "many.html", figures=0)
    opened = Opened(browser, tmp_path / "many.html")
    seen: list[str] = []
    next_button = opened.page.locator("#variables button", has_text="next")
    while True:
        seen += opened.page.locator("#variables tbody td.name").all_inner_texts()
        if next_button.is_disabled():
            break
        next_button.click()
    assert sorted(seen) == names
    assert "101\u2013120 of 120" in opened.text("#variables .pager")
    opened.page.locator("#variables input[type=search]").fill("layer_07")
    assert opened.page.locator("#variables tbody td.name").all_inner_texts() == [f"layer_07{i}/w" for i in range(10)]
    opened.check_clean()
    opened.page.close()
