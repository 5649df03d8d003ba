"""Helpers to drive JupyterLab in a real Chromium: start a server, open a notebook, run it.

Kept apart from the tests so a developer can also use them by hand, e.g. to take a
screenshot of a panel while changing its layout.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
#: Every browser test module sets `pytestmark = NEEDS_BROWSER`: marked, and skipped, with
#: the reason printed, where Debian's Chromium is missing.
NEEDS_BROWSER = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs {CHROMIUM}: "
                       "apt-get install -y chromium"),
]
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
REPO = Path(__file__).resolve().parents[2]
#: JupyterLab settings of the test server: every cell of a notebook is laid out, not only
#: those in view (so the page can be measured and photographed whole), and nothing is saved
#: behind the test's back.
USER_SETTINGS = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
                 "@jupyterlab/docmanager-extension:plugin": {"autosave": False}}
ARTIFACTS = REPO / "test-artifacts"


def free_port() -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: Path, cells: list[str]) -> None:
    """Save code cells as a notebook with a python3 kernelspec (without it JupyterLab asks
    which kernel to use, and the dialog blocks an unattended run)."""
    nb = {
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                   "outputs": [], "source": src} for i, src in enumerate(cells)],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                    "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, indent=1))


@contextmanager
def jupyter_lab(root: Path, timeout_s: float = 90):
    """Run JupyterLab on 127.0.0.1 (free port, random token) in ``root``; yield its base URL
    and token; stop the server and every kernel it started on exit."""
    port, token = free_port(), secrets.token_hex(16)
    config_dir = root / ".jupyter"
    (config_dir / "labconfig").mkdir(parents=True, exist_ok=True)
    (config_dir / "labconfig" / "page_config.json").write_text(json.dumps(  # no news pop-up
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    for plugin, values in USER_SETTINGS.items():
        path = config_dir / "lab" / "user-settings" / f"{plugin.replace(':', '/')}"
        path = path.with_name(path.name + ".jupyterlab-settings")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir),
           "JUPYTER_DATA_DIR": str(root / ".data"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime"),
           "PYTHONPATH": str(REPO)}
    log = open(root / "jupyterlab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", f"--IdentityProvider.token={token}", "--allow-root",
         "--LabApp.expose_app_in_browser=True", f"--ServerApp.root_dir={root}",
         "--ServerApp.port_retries=0",
         "--LabApp.news_url=None", "--LabApp.check_for_updates_class="
         "jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited: {(root / 'jupyterlab.log').read_text()}")
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("JupyterLab did not answer within "
                                       f"{timeout_s} s") from None
                time.sleep(0.5)
        yield url, token
    finally:
        _stop_group(proc)
        log.close()


def _stop_group(proc: subprocess.Popen) -> None:
    """End JupyterLab and its kernels: SIGTERM to its process group, SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def chromium():
    """Debian's Chromium driven by Playwright; closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def chromium_page(width: int = 1400, height: int = 1300):
    """A Playwright page in Debian's Chromium; the browser is closed on exit."""
    with chromium() as browser:
        yield browser.new_page(viewport={"width": width, "height": height})


#: JavaScript: true once the notebook's kernel is connected.
KERNEL_CONNECTED = ("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                    " return w && w.sessionContext && w.sessionContext.session &&"
                    " w.sessionContext.session.kernel &&"
                    " w.sessionContext.session.kernel.connectionStatus === 'connected'; }")

#: JavaScript: the current widget's title, and its kernel's connection and execution state.
KERNEL_STATE = ("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                " const k = w && w.sessionContext && w.sessionContext.session &&"
                " w.sessionContext.session.kernel;"
                " return `${w ? w.title.label : 'no widget'}: `"
                " + (k ? `${k.connectionStatus}/${k.status}` : 'no kernel'); }")


def open_and_run(page, url: str, token: str, notebook: str, timeout_ms: int = 120_000,
                 workspace: str | None = None) -> None:
    """Open ``notebook`` in JupyterLab and run all its cells (returns once they are queued).

    Pages open at once in one browser each need a ``workspace`` of their own: JupyterLab
    restores a workspace's open notebooks, so in a shared one each page would open the
    others' too."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    said: list[str] = []  # the page's errors, for the warning below
    page.on("console", lambda m: said.append(m.text) if m.type == "error" else None)
    page.on("requestfailed", lambda r: said.append(f"request failed: {r.url} {r.failure}"))
    lab = f"{url}/lab/workspaces/{workspace}" if workspace else f"{url}/lab"
    page.goto(f"{lab}/tree/{notebook}?token={token}")
    page.wait_for_function(
        "() => window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')",
        timeout=timeout_ms)
    try:  # the kernel must be ready before cells are sent to it
        page.wait_for_function(KERNEL_CONNECTED, timeout=timeout_ms // 2)
    except PlaywrightTimeout:
        # On a loaded machine a first load can fail a request (seen: "Error Loading Theme",
        # a stylesheet that did not come) and the page never connects: load it once more,
        # and say so with what the page reported (the suite's warnings summary shows it).
        warnings.warn(f"{notebook}: no kernel connection after {timeout_ms // 2000} s "
                      f"({page.evaluate(KERNEL_STATE)}), reloading; the page said: "
                      f"{said[-5:]}", stacklevel=2)
        page.reload()
        page.wait_for_function(KERNEL_CONNECTED, timeout=timeout_ms // 2)
    # execute() returns a promise that may never settle: start it and return at once
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells');"
                  " return true; }")


#: JavaScript: length of column ``col`` of the Bokeh data source named ``name`` in any Bokeh
#: document of the page (0 if none yet). BokehJS keeps the documents it renders in
#: ``Bokeh.documents``; jupyter_bokeh's views live in ``Bokeh.index``.
SOURCE_LENGTH_JS = """
([name, col]) => {
  const B = window.Bokeh;
  if (!B) return -1;
  const docs = new Set(B.documents || []);
  const index = B.index || {};
  const views = typeof index.values === 'function' ? [...index.values()]
                : Object.values(index);
  for (const v of views) { if (v && v.model && v.model.document) docs.add(v.model.document); }
  let best = 0;
  for (const doc of docs) {
    const m = doc.get_model_by_name(name);
    if (!m || !m.data) continue;
    const data = m.data instanceof Map ? Object.fromEntries(m.data) : m.data;
    const c = data[col];
    if (c && c.length > best) best = c.length;
  }
  return best;
}
"""
