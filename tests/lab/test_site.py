"""The report site (``make site``) as a reader opens it: headless Chromium on the built pages
(``file://``, no server, no network). Asserted: the index shows a verdict for every claim of
``figures/claims.json`` and every figure it shows has loaded (a decoded image with a width); each
notebook page shows its figures loaded and its verdict table. Run by ``make test-lab`` with the
lab test; skipped elsewhere, ``make test`` included (``tests/test_site.py`` checks the same
pages as HTML there)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

if os.environ.get("TAILTHEORY_TEST_LAB") != "1":
    pytest.skip("the site in a browser: run by `make test-lab`", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "lab" / "out" / "site"

_IMAGES = """return Array.from(document.images).map(i => [i.getAttribute('src').slice(0, 40),
                                                  i.complete && i.naturalWidth > 0]);"""


@pytest.fixture(scope="module")
def pages():
    spec = importlib.util.spec_from_file_location("site_build", ROOT / "docs" / "site" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    build.build(OUT)
    return OUT


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _loaded(driver, url: str) -> list:
    driver.get(url)
    driver.execute_script("return document.readyState")
    return driver.execute_script(_IMAGES)


def test_the_index_shows_every_verdict_and_figure(pages, browser):
    images = _loaded(browser, (pages / "index.html").as_uri())
    assert len(images) >= 40 and all(ok for _, ok in images), [s for s, ok in images if not ok]
    claims = json.loads((ROOT / "figures" / "claims.json").read_text())["claims"]
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#verdicts tr')).slice(1)"
        ".map(r => [r.cells[0].innerText, r.cells[3].innerText]);")
    assert rows == [[c["id"], c["verdict"]] for c in claims]


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "docs" / "notebooks")
                                        .glob("[0-9]*.ipynb")))
def test_each_notebook_page_shows_its_figures_and_verdicts(pages, browser, name):
    images = _loaded(browser, (pages / "notebooks" / f"{name}.html").as_uri())
    assert images and all(ok for _, ok in images), [s for s, ok in images if not ok]
    headers = browser.execute_script(
        "return Array.from(document.querySelectorAll('th')).map(t => t.innerText.trim());")
    assert "verdict" in headers and "key numbers" in headers
