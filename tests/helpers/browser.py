"""The explorer as a real `crucible explorer serve` process, and headless Chromium (JavaScript off) to
look at it; screenshots go to test-artifacts/ (or $CRUCIBLE_TEST_ARTIFACTS)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

CRUCIBLE = str(Path(sys.executable).parent / "crucible")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("CRUCIBLE_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip


@contextmanager
def explorer_process(home: Path, rpc: str, book: Path, *options: str) -> Iterator[str]:
    """`crucible explorer serve` on a free port; yields its URL once /healthz answers, stops it after."""
    env = {**os.environ, "CRUCIBLE_HOME": str(home)}
    command = [CRUCIBLE, "--rpc", rpc, "--deployment", str(book), "explorer", "serve", "--port", "0", "--json",
               *options]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line, server.stderr.read() if server.stderr else ""
        url = str(json.loads(line)["url"])
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the explorer never answered /healthz"
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextmanager
def browser_page() -> Iterator[Any]:
    """A page of headless Chromium with JavaScript off (the explorer needs none); skips, saying why, where
    there is no Chromium."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium (as root)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser.new_context(java_script_enabled=False).new_page()
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> None:
    """The whole page, as test-artifacts/<name>.png."""
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
