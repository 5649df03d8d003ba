"""A quiet JupyterLab: the environment's settings overrides switch the "get notified about
official Jupyter news?" pop-up off, and a real JupyterLab server reads them."""

from __future__ import annotations

import json
import sys
import urllib.request

from browser.labdriver import jupyter_lab

from workbench.classroom.lab import QUIET, overrides_path, quiet_jupyterlab

PLUGIN = "@jupyterlab/apputils-extension:notification"


def test_quiet_jupyterlab_merges_into_existing_overrides(tmp_path):
    path = overrides_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "dark"},
                                PLUGIN: {"doNotDisturbMode": True}}))
    assert quiet_jupyterlab(tmp_path) == path
    assert json.loads(path.read_text()) == {
        "@jupyterlab/apputils-extension:themes": {"theme": "dark"},
        PLUGIN: {"doNotDisturbMode": True, **QUIET[PLUGIN]}}


def test_the_environment_jupyterlab_never_asks_about_news(tmp_path):
    path = overrides_path(sys.prefix)
    assert path.exists(), "the set-up writes it: run `make setup`"
    assert json.loads(path.read_text())[PLUGIN]["fetchNews"] == "false"
    with jupyter_lab(tmp_path) as (url, token):
        with urllib.request.urlopen(f"{url}/lab/api/settings/{PLUGIN}?token={token}") as r:
            served = json.load(r)
    # JupyterLab applies the overrides as the setting's default: the pop-up asks only when
    # fetchNews is "none".
    assert served["schema"]["properties"]["fetchNews"]["default"] == "false"
