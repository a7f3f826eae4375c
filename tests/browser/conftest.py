"""The browser suite's fixtures: a JupyterLab server of its own (`lab`) and the folder its screenshots go to
(`shots`). The rest of what its tests share (Chromium and its flags, servers, page measures) is in
tests/helpers/lab.py."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.lab import free_port, kernel_env, stop, wait_until_up

HERE = Path(__file__).parent


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server of our own: (base url, token); stopped with all its kernels afterwards."""
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install jupyterlab)")
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(HERE / "live_views.ipynb", root)
    settings = tmp_path / "settings"
    for plugin, values in {"@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                                         "checkForUpdates": False}}.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = free_port(), secrets.token_hex(16)
    env = {**kernel_env(), "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTER_RUNTIME_DIR": str(tmp_path / "run")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
         f"--ServerApp.root_dir={root}", "--allow-root"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/api/status?token={token}", server, tmp_path / "server.log")
        yield url, token
    finally:
        stop(server)


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("TEACHSPEC_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
