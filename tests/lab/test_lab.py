"""Notebook 01 as a user sees it: JupyterLab in headless Chromium (selenium with Debian's
``chromium`` and ``chromedriver``), the notebook opened, *Run* → *Run All Cells* from the menu,
then *File* → *Save Notebook*.

Asserted: the figures are visible in the page as images, the verdict cell shows its HTML table,
no cell shows an error; saving leaves the pair as the tests and git want it (the saved ``.py`` is
the source byte for byte, the saved ``.ipynb`` carries outputs that nbstripout's git filter, as
the Makefile installs it, strips back to the committed file, and the pairing test's comparison
of sources holds); the kernel saved its figures in the ignored ``figures/scratch/``, not in the
tracked ``figures/``. The notebook runs from a copy under ``tests/lab/out/`` (ignored), so the
checkout's files are never written; a screenshot of the page is left there.

Run by ``make test-lab`` (which installs chromium and selenium if missing); skipped elsewhere,
``make test`` included. About two minutes on a 2-core CPU.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

if os.environ.get("TAILTHEORY_TEST_LAB") != "1":
    pytest.skip("JupyterLab in a browser: run by `make test-lab`", allow_module_level=True)

import jupytext  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAME = "01_token_tail"
OUT = ROOT / "tests" / "lab" / "out"
SCRATCH = ROOT / "figures" / "scratch"
RUN_TIMEOUT_S = 300  # notebook 01 takes about 20 s in a kernel, the page a few more


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(*names: str) -> str:
    for n in names:
        path = shutil.which(n)
        if path:
            return path
    pytest.fail(f"none of {names} on PATH: `make test-lab` installs Debian's chromium and "
                "chromium-driver")


def _git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True,
                          check=True).stdout


def _git_checkout(work: Path) -> None:
    """Make ``work`` a git repository with the checkout's notebook filter, as the Makefile sets it
    up (nbstripout with ids kept and ``language_info`` stripped), the pair committed."""
    (work / ".gitattributes").write_text(f"{NAME}.ipynb filter=nbstripout\n"
                                         f"{NAME}.ipynb diff=ipynb\n")
    _git(work, "init", "-q")
    for key, value in (("filter.nbstripout.clean", f'"{sys.executable}" -m nbstripout --keep-id'),
                       ("filter.nbstripout.smudge", "cat"), ("filter.nbstripout.required", "true"),
                       ("filter.nbstripout.extrakeys", "metadata.language_info"),
                       ("user.name", "test"), ("user.email", "test@example.invalid")):
        _git(work, "config", key, value)
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "the committed pair")


@pytest.fixture(scope="module")
def lab():
    """A JupyterLab server on a free local port with a token, rooted at a copy of notebook 01's
    pair, its settings in a fresh folder (no user settings, no update or news checks)."""
    if OUT.exists():
        shutil.rmtree(OUT)
    work = OUT / "notebooks"
    work.mkdir(parents=True)
    for ext in (".ipynb", ".py"):
        shutil.copy2(ROOT / "notebooks" / f"{NAME}{ext}", work / f"{NAME}{ext}")
    _git_checkout(work)
    home = OUT / "jupyter"
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)  # no "get notified about Jupyter news?" toast over the page
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for name in ("MPLBACKEND", "TAILTHEORY_PRESET", "TAILTHEORY_FIGURES"):  # a user's shell
        env.pop(name, None)
    port, token = _free_port(), secrets.token_hex(16)
    log = open(OUT / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.news_url=None"] + (["--allow-root"] if os.geteuid() == 0 else []),
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n" + (OUT / "lab.log").read_text())
                time.sleep(0.5)
        yield url, token, work
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = _which("chromium", "chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(_which("chromedriver")), options=opts)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _menu(driver, wait, menu: str, item: str) -> None:
    """Click ``menu`` in the menu bar, then its entry ``item``, as a user does."""
    bar = wait.until(EC.element_to_be_clickable(
        (By.XPATH, f"//li[contains(@class,'lm-MenuBar-item')][.//*[text()='{menu}']]")))
    bar.click()
    wait.until(EC.element_to_be_clickable(
        (By.XPATH, f"//li[contains(@class,'lm-Menu-item')][.//*[text()='{item}']]"))).click()


def _cells(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError):  # not written yet, or being written
        return []


_PROMPTS = """
return Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt'))
            .map(p => p.textContent.trim());"""


@pytest.fixture(scope="module")
def ran(lab, browser):
    """Notebook 01 opened, run with Run → Run All Cells, then saved with File → Save Notebook."""
    url, token, work = lab
    tracked = {p: p.stat().st_mtime_ns for p in (ROOT / "figures").glob("*.png")}
    t0 = time.time()
    driver, wait = browser, WebDriverWait(browser, 120)
    try:
        return _run_and_save(driver, wait, url, token, work, tracked, t0)
    except Exception:
        driver.save_screenshot(str(OUT / "failure.png"))
        raise


def _run_and_save(driver, wait, url, token, work, tracked, t0):
    driver.get(f"{url}/lab/tree/{NAME}.ipynb?reset&token={token}")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell")))
    wait.until(lambda d: "Python 3 | Idle" in d.find_element(By.ID, "jp-main-statusbar").text,
               message="the kernel did not start")

    def started(d):  # some cell queued, running or run
        return any(p != "[ ]:" for p in d.execute_script(_PROMPTS))

    for attempt in range(2):  # Lab may swap the kernel it started while the page opens
        time.sleep(2)
        _menu(driver, wait, "Run", "Run All Cells")
        try:
            WebDriverWait(driver, 60).until(started)
            break
        except TimeoutException:
            print("Run All Cells queued nothing; the kernel was being replaced: again")
    else:
        pytest.fail("Run → Run All Cells ran no cell, twice")

    def finished(d):  # every code cell numbered, none queued or running, kernel idle
        prompts = d.execute_script(_PROMPTS)
        idle = d.find_elements(By.CSS_SELECTOR,
                               ".jp-Notebook-ExecutionIndicator[data-status='idle']")
        return bool(prompts) and all(p[1:-2].isdigit() for p in prompts) and bool(idle)

    WebDriverWait(driver, RUN_TIMEOUT_S, poll_frequency=1).until(
        finished, message=f"Run All did not finish in {RUN_TIMEOUT_S} s")
    run_s = time.time() - t0
    _menu(driver, wait, "File", "Save Notebook")
    wait.until(lambda d: any(c.get("outputs") for c in _cells(work / f"{NAME}.ipynb")),
               message="File → Save Notebook did not write the outputs")
    print(f"notebook {NAME}: Run All {run_s:.0f} s in JupyterLab")
    return driver, work, tracked, t0


def test_figures_are_visible(ran):
    driver, _, _, _ = ran
    images = driver.find_elements(By.CSS_SELECTOR, ".jp-RenderedImage img")
    src = jupytext.read(ROOT / "notebooks" / f"{NAME}.py")
    expected = sum(c.source.count("show_figure(fig") for c in src.cells if c.cell_type == "code")
    assert len(images) >= expected >= 5, f"{len(images)} images in the page, {expected} expected"
    for img in images:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", img)
        time.sleep(0.2)
        assert img.is_displayed()
        width = driver.execute_script("return arguments[0].naturalWidth;", img)
        assert width > 100, f"an image did not load (naturalWidth {width})"
        assert img.size["width"] > 100 and img.size["height"] > 50, img.size
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", images[0])
    time.sleep(0.3)
    driver.save_screenshot(str(OUT / f"{NAME}_figure.png"))


def test_verdict_table_and_no_errors(ran):
    driver, _, _, _ = ran
    tables = driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea table.tailtheory-verdicts")
    assert len(tables) == 1, "the verdict cell shows one HTML table"
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", tables[0])
    time.sleep(0.3)
    assert tables[0].is_displayed()
    text = tables[0].text
    for cid in ("S4", "M3", "M7", "P4"):
        assert cid in text, f"{cid} missing from the verdict table"
    driver.save_screenshot(str(OUT / f"{NAME}_verdicts.png"))
    errors = driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output[data-mime-type="
                                  "'application/vnd.jupyter.stderr']")
    assert not errors, "stderr or an error in the page:\n" + "\n".join(e.text for e in errors)


def test_saving_keeps_the_pair_clean(ran):
    """What Lab saved: the .py unchanged, the .ipynb back to the committed file once nbstripout's
    filter (as the Makefile installs it) strips it, and the same sources in both."""
    _, work, _, _ = ran
    src_py, src_nb = (ROOT / "notebooks" / f"{NAME}{e}" for e in (".py", ".ipynb"))
    saved_py, saved_nb = (work / f"{NAME}{e}" for e in (".py", ".ipynb"))
    assert saved_py.read_text() == src_py.read_text(), "saving in Lab rewrote the paired .py"
    saved = json.loads(saved_nb.read_text())
    assert any(c.get("outputs") for c in saved["cells"]), "the saved notebook has its outputs"
    stripped = subprocess.run(
        [sys.executable, "-m", "nbstripout", "--keep-id", "--extra-keys",
         "metadata.language_info", "-t", str(saved_nb)],
        capture_output=True, text=True, check=True).stdout
    assert stripped == src_nb.read_text(), "nbstripout's filter leaves a difference to commit"
    nb, py = jupytext.read(saved_nb), jupytext.read(saved_py)
    assert [c.source.strip() for c in nb.cells] == [c.source.strip() for c in py.cells]


def test_git_sees_no_change_after_saving(ran):
    """After File → Save, ``git status`` in a checkout with the notebook filter shows nothing to
    commit (the outputs Lab saved are the filter's to strip), so switching branches is not
    refused."""
    _, work, _, _ = ran
    status = _git(work, "status", "--porcelain", "--untracked-files=no")
    assert status == "", f"git status after saving in Lab:\n{status}" + _git(work, "diff", "--stat")


def test_reopened_notebook_shows_its_widgets(ran, lab):
    """Reopened in a fresh page with a new kernel, the saved notebook's widget outputs (notebook
    01's explorer) are drawn from their saved state, not "model not found"."""
    driver, work, _, _ = ran
    url, token, _ = lab
    saved = json.loads((work / f"{NAME}.ipynb").read_text())
    assert saved["metadata"].get("widgets"), "the saved notebook holds no widget state"
    driver.get(f"{url}/lab/tree/{NAME}.ipynb?reset&token={token}")
    WebDriverWait(driver, 120).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell")))
    time.sleep(5)
    page = driver.find_element(By.CSS_SELECTOR, ".jp-Notebook").text
    assert "model not found" not in page.lower(), "a widget output could not be drawn"


def test_figures_went_to_scratch(ran):
    _, _, tracked, t0 = ran
    changed = [p.name for p, m in tracked.items() if p.stat().st_mtime_ns != m]
    assert not changed, f"a run in Lab rewrote tracked figures: {changed}"
    fresh = [p for p in SCRATCH.glob("token_tail_*.png") if p.stat().st_mtime >= t0 - 1]
    assert fresh, f"no figure saved in {SCRATCH}"
