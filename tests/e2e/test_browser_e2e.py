"""`ddptui serve` in a real browser: Debian's headless Chromium, driven by Selenium through the
system chromedriver (never a downloaded one), on a real run of the ssh test hosts: the page and
socket refused without the token, the run's lines arriving, `d` typed into the page bringing every
rank's stack, no key that stops it, a malformed resize sent on its socket dropped, and the run
going on, detached, once the browser leaves.

The page draws the terminal with xterm.js on a canvas, so its text is read from xterm's own
buffer: a script set before the page's own catches the Terminal as textual-serve's page stores it
(`this.terminal = new Terminal(...)`), and `buffer.active` gives each row's text.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2etools import Cli, Cmd, assert_nothing_left, children, node_file, wait_for
from testhosts import REPO, TestCluster

from ddptui.remote.host.netif import free_port

pytestmark = pytest.mark.e2e

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {configurable: true, set(value) {
  Object.defineProperty(this, "terminal", {value, writable: true, configurable: true,
                                           enumerable: true});
  if (value && value.buffer) { window.caughtTerminal = value; window.caughtPage = this; }
}});
"""
BAD_RESIZE = """
window.caughtPage.socket.send(JSON.stringify(["resize", {"width": "x", "height": 24}]));
"""
READ_TERMINAL = """
const t = window.caughtTerminal;
if (!t) return "";
const rows = [];
for (let i = 0; i < t.buffer.active.length; i++)
  rows.push(t.buffer.active.getLine(i).translateToString(true));
return rows.join("\\n");
"""


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        if os.environ.get("CI"):
            raise AssertionError("the browser test needs apt's chromium and chromium-driver")
        pytest.skip("no chromium/chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--window-size=1400,900"):
        options.add_argument(arg)  # --no-sandbox: the tests run as root
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CATCH_TERMINAL})
    try:
        yield driver
    finally:
        driver.quit()


def status(port: int, path: str, headers: dict[str, str] | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        return conn.getresponse().status
    finally:
        conn.close()


def websocket_status(port: int, path: str) -> int:
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}  # fmt: skip
    return status(port, path, upgrade)


def ticks(text: str, rank: int) -> list[int]:
    """The numbers of rank's `tick <rank> <i>` lines on the screen."""
    words = [line.split(f"tick {rank} ", 1)[1].split() for line in text.splitlines()
             if f"tick {rank} " in line]  # fmt: skip
    return [int(w[0]) for w in words if w and w[0].isdigit()]


def test_a_browser_watches_a_run_and_the_token_guards_it(
    cluster: TestCluster, tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.keys import Keys

    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    job = {"script": "tests/data/tick.py", "args": ["100000", "0.2"], "nproc_per_node": 2,
           "master_port": free_port(), "link_timeout": 10, "stop_grace": 2}  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    launch = Cli(inv, tmp_path / "run", flags=["--detach"], env=env)
    assert launch.wait(120) == 0, launch.stderr
    run_id = launch.stdout.splitlines()[-1]
    port = free_port()
    out = tmp_path / "serve.out"
    with out.open("w") as sink:
        serve = subprocess.Popen(
            [sys.executable, "-m", "ddptui.tui.cli", "serve", run_id[:12], "-i", str(inv),
             "--port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, **env},
        )  # fmt: skip
    try:
        url = wait_for(lambda: _url(out.read_text()), 30, "serve to print its URL")
        assert f"http://127.0.0.1:{port}/" in url and "ssh -L" in out.read_text()
        token_path = url.split(str(port), 1)[1]
        for path in ("/", "/static/js/textual.js", token_path[:-2] + "/"):
            assert status(port, path) == 403, path
        assert websocket_status(port, "/ws") == 403
        assert websocket_status(port, "/x" + token_path + "ws") == 403
        assert status(port, token_path) == 200

        browser.get(f"http://127.0.0.1:{port}/")  # the browser too is refused without it
        assert "403" in browser.find_element("tag name", "body").text
        browser.get(url)
        screen = lambda: str(browser.execute_script(READ_TERMINAL))  # noqa: E731
        wait_for(lambda: len(ticks(screen(), 3)) > 5, 60, "rank 3's ticks in the page")
        seen = max(ticks(screen(), 3))
        wait_for(lambda: max(ticks(screen(), 3) or [0]) > seen + 5, 30, "newer ticks arriving")
        text = screen()
        footer = text.rstrip().splitlines()[-1]
        assert "Stacks" in footer and not {"Launch", "Stop", "Restart"} & set(footer.split())
        assert f"run {run_id}" in text and "node1" in text
        browser.save_screenshot(str(tmp_path / "browser.png"))
        keys = browser.find_element("css selector", ".xterm-helper-textarea")
        keys.send_keys("d")
        wait_for(lambda: "saved to" in screen(), 60, "every rank's stack in the page")
        assert "every rank's stack" in screen() and "tick.py" in screen()
        browser.save_screenshot(str(tmp_path / "stacks.png"))

        browser.execute_script(BAD_RESIZE)  # it crashed the dashboard, which hung up
        keys.send_keys(Keys.ESCAPE)  # back to the logs: the dashboard lives on, live
        seen = max(ticks(text, 3))
        wait_for(lambda: max(ticks(screen(), 3) or [0]) > seen + 10, 30, "the logs, live again")

        browser.get("about:blank")  # the browser leaves: its dashboard ends, the run as it was
        wait_for(lambda: not children(serve.pid), 30, "the page's dashboard to end")
        time.sleep(2 + 3)  # past stop_grace: a stop would have ended it (nothing to wait on)
        assert len(cluster.pids_with_env("DDPTUI_RUN_ID", run_id)) >= 4, "the run was stopped"
        for k in (0, 1):
            state = node_file(cluster, k, run_id, f"n{k}", "state.json").read_text()
            assert json.loads(state)["mode"] == "detached"
    finally:
        serve.terminate()
        serve.wait(30)
    stop = Cmd(["stop", run_id], tmp_path / "stop", env)
    assert stop.wait(60) == 0, stop.stderr
    assert_nothing_left(cluster, run_id)


def _url(text: str) -> str | None:
    for word in text.split():
        if word.startswith("http://"):
            return word
    return None
