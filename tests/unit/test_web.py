"""`ddptui serve`'s server: every page, asset and socket under the token (else 403), and the
command textual-serve runs for each browser quoted word by word."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from e2etools import children, wait_for

from ddptui.remote.host.netif import free_port
from ddptui.tui import browser, cli, web
from ddptui.tui.web import TokenServer, app_command, url_host

TOKEN = "s3cret-Token_0123456789abcdef"


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    server = TokenServer("false", "127.0.0.1", 8000, TOKEN)
    async with TestClient(TestServer(await server._make_app())) as c:
        yield c


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/ws",
        "/static/js/textual.js",
        "/download/x",
        f"/{TOKEN[:-1]}/",
        f"/{TOKEN}x/static/js/textual.js",
        f"/x/{TOKEN}/",
    ],
)
async def test_without_the_token_everything_is_refused(client: TestClient, path: str) -> None:
    response = await client.get(path)
    assert response.status == 403
    assert TOKEN not in await response.text()


async def test_a_websocket_without_the_token_is_refused(client: TestClient) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await client.ws_connect("/ws")
    assert caught.value.status == 403


async def test_the_page_and_its_assets_carry_the_token(client: TestClient) -> None:
    page = await client.get(f"/{TOKEN}/")
    assert page.status == 200
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    html = await page.text()
    assert f'data-session-websocket-url="ws://127.0.0.1:8000/{TOKEN}/ws"' in html
    assert f"http://127.0.0.1:8000/{TOKEN}/static/js/textual.js" in html
    script = await client.get(f"/{TOKEN}/static/js/textual.js")
    assert script.status == 200


def test_the_app_command_quotes_every_word(tmp_path: Path) -> None:
    odd = tmp_path / "my inv $(touch pwned) `x`;.yaml"
    line = app_command(odd, tmp_path / "runs 'a'", "run; rm -rf ~", control=True)
    assert shlex.split(line) == [
        sys.executable, "-m", "ddptui.tui.web", "--inventory", str(odd), "--runs-root",
        str(tmp_path / "runs 'a'"), "--run", "run; rm -rf ~", "--control",
    ]  # fmt: skip


def test_a_url_names_a_reachable_host() -> None:
    assert url_host("127.0.0.1") == "127.0.0.1"
    assert url_host("::1") == "[::1]"
    assert url_host("0.0.0.0") not in ("0.0.0.0", "")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serve", "--port", "0"], "--port 0: give a port from 1 to 65535"),
        (["serve", "nosuchrun"], "no run matches 'nosuchrun'"),
        (["--headless", "serve"], "serve takes no --headless"),
    ],
)
def test_serve_usage_mistakes_are_one_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert cli.main(argv) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ("127.0.0.1", "ssh -L 8000:127.0.0.1:8000"),
        ("0.0.0.0", "warning: exposed on 0.0.0.0:8000"),
    ],
)
def test_serve_says_how_to_reach_it_or_that_it_is_exposed(
    host: str, said: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    served: list[TokenServer] = []
    monkeypatch.setattr(TokenServer, "serve", lambda self: served.append(self))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert cli.main(["serve", "--host", host]) == 0
    out = capsys.readouterr()
    assert said in out.out + out.err
    (server,) = served
    assert server.host == host and "--control" not in server.command
    assert server.token not in server.command  # nor in any process list


# An app that says it is one (textual-serve waits for this line), then ends when told anything
# (the first thing a page with no size to tell sends is textual-serve's quit).
FAKE_APP = "import sys; print('__GANGLION__', flush=True); sys.stdin.buffer.read(1)"
SERVER = """
import sys
from ddptui.tui.web import TokenServer
TokenServer(sys.argv[1], "127.0.0.1", int(sys.argv[2]), "tok").serve()
"""


def test_stopping_with_a_page_open_ends_it_at_once_and_quietly(tmp_path: Path) -> None:
    """SIGTERM while a page's app runs: the page's socket and app are ended at once (aiohttp
    alone waited 20 s and more for the socket), and nothing of asyncio is printed."""
    port = free_port()
    command = shlex.join([sys.executable, "-c", FAKE_APP])
    out = tmp_path / "serve.out"
    with out.open("w") as sink:
        server = subprocess.Popen([sys.executable, "-c", SERVER, command, str(port)],
                                  stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_for(lambda: "/tok/" in out.read_text(), 30, "the server to listen")

        async def open_page() -> None:
            page = f"http://127.0.0.1:{port}/tok/ws"
            async with aiohttp.ClientSession() as session, session.ws_connect(page) as ws:
                wait_for(lambda: children(server.pid), 30, "the page's app to start")
                server.terminate()
                started = time.monotonic()
                async for _ in ws:  # until the server closes it
                    pass
                assert await asyncio.to_thread(server.wait, 10) == 0
                assert time.monotonic() - started < 10

        asyncio.run(open_page())
    finally:
        server.kill()
    said = out.read_text()
    assert "Traceback" not in said and "Event loop is closed" not in said, said


@pytest.mark.security
@pytest.mark.parametrize(
    "text",
    [
        '["resize", {"width": "x", "height": 24}]',
        '["resize", {"width": 80}]',
        '["resize", {"width": -1, "height": 24}]',
        '["resize", {"width": 10000000, "height": 24}]',
        '["resize", {"width": true, "height": 24}]',
        '["resize", "80x24"]',
        '["stdin", 42]',
        '["stdin", "' + "a" * (browser.STDIN_MAX + 1) + '"]',
        '["ping", {"a": 1}]',
        '["quit"]',
        '{"resize": 1}',
        "[]",
        "not json",
    ],
)
def test_what_a_page_would_not_send_is_dropped(text: str) -> None:
    assert browser.message(text) is None


def test_what_the_page_sends_is_passed_on() -> None:
    assert browser.message('["resize", {"width": 132, "height": 40}]') == ("resize", (132, 40))
    assert browser.message('["stdin", "q\\u001b[A"]') == ("stdin", "q\x1b[A")
    assert browser.message('["ping", "1712345678901"]') == ("ping", "1712345678901")
    assert browser.message('["focus"]') == ("focus", None)


class Service:
    """An app's service as textual-serve's server drives it: what reaches the dashboard."""

    def __init__(self) -> None:
        self.got: list[object] = []

    async def send_bytes(self, data: bytes) -> None:
        self.got.append(data)

    async def set_terminal_size(self, width: int, height: int) -> None:
        self.got.append((width, height))


@pytest.mark.security
async def test_a_bad_resize_never_reaches_the_dashboard() -> None:
    """textual-serve passed `["resize", {"width": "x"}]` on, and the dashboard crashed on it."""
    server, service = TokenServer("false", "127.0.0.1", 8000, TOKEN), Service()
    frames = ['["resize", {"width": "x", "height": 24}]', '["resize", {"width": 90, "height": 30}]',
              '["stdin", "j"]']  # fmt: skip

    async def socket() -> AsyncIterator[aiohttp.WSMessage]:
        for text in frames:
            yield aiohttp.WSMessage(aiohttp.WSMsgType.TEXT, text, None)

    await server._process_messages(socket(), service)  # type: ignore[arg-type]
    assert service.got == [(90, 30), b"j"]


@pytest.mark.security
@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({}, True),  # not a browser: it holds the token
        ({"Origin": "http://127.0.0.1:8000"}, True),
        ({"Origin": "https://evil.example"}, False),
        ({"Origin": "null"}, False),
        ({"Host": "evil.example:8000", "Origin": "http://evil.example:8000"}, False),  # rebinding
        ({"Host": "localhost:9999", "Origin": "http://localhost:9999"}, True),  # ssh -L
    ],
)
async def test_a_socket_from_another_origin_or_host_is_refused(
    client: TestClient, headers: dict[str, str], allowed: bool
) -> None:
    headers = {"Host": "127.0.0.1:8000", **headers}
    try:
        ws = await client.ws_connect(f"/{TOKEN}/ws", headers=headers)
    except aiohttp.WSServerHandshakeError as refused:
        assert not allowed and refused.status == 403
    else:
        await ws.close()
        assert allowed


@pytest.mark.security
async def test_a_tab_past_the_bound_is_told_so(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web, "TABS_MAX", 0)
    ws = await client.ws_connect(f"/{TOKEN}/ws")
    said = await ws.receive()
    assert b"0 tabs are open already, the most it serves" in said.data
    assert (await ws.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


@pytest.mark.security
async def test_a_socket_asking_no_size_is_refused(client: TestClient) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await client.ws_connect(f"/{TOKEN}/ws?width=x&height=24")
    assert caught.value.status == 400


@pytest.mark.security
async def test_the_page_loads_no_clipboard_add_on(client: TestClient) -> None:
    """OSC 52 from a host's text would write the viewer's clipboard through it."""
    script = await (await client.get(f"/{TOKEN}/static/js/textual.js")).text()
    assert "new b.ClipboardAddon" in web.SCRIPT.read_text()  # textual-serve's own loads it
    assert "ClipboardAddon;this.terminal.loadAddon" not in script
    assert "this.terminal.loadAddon(this.weblinksAddon)" in script  # the rest as it was
