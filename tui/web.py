"""`ddptui serve`: the dashboard in a browser. textual-serve (from Textual's makers) serves a
page that runs xterm.js, and starts a dashboard process of its own for each browser connection,
spoken to over a websocket.

textual-serve has no authentication: here every page, asset and socket lives under a random
token (`/<token>/...`, the URL printed) and anything else is refused with 403. The token is only
in this process's memory and the printed URL, never on a command line (`ps` shows command lines
to every user). A request's Host must name this machine and a socket's Origin be the page's
own; what a socket sends is checked before it reaches a dashboard (tui/browser.py); at most
TABS_MAX tabs are served at once (each is a dashboard process with SSH to every host). Each
browser's dashboard is read-only unless `--control`: a read-only one only views, and however it
ends leaves its run exactly as it was; a --control tab's own run is detached as it leaves.

`python -m ddptui.tui.web` is that per-browser dashboard (the command textual-serve runs).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import logging
import secrets
import shlex
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import WSMsgType, web
from textual_serve import server as textual_serve
from textual_serve.app_service import AppService
from textual_serve.server import Server

from . import browser
from .dashboard.app import create_app

# The page loads nothing from elsewhere (textual-serve's page asks Google for its font: refused,
# the same font comes with it), and what it runs and draws comes from here.
PAGE_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TABS_MAX = 8  # browser tabs served at once: each runs a dashboard with SSH to every host
SCRIPT = Path(textual_serve.__file__).parent / "static" / "js" / "textual.js"


def app_command(inventory: Path, runs_root: Path | None, run: str | None, control: bool) -> str:
    """The shell command textual-serve runs for each browser (it runs it with a shell): every
    word quoted."""
    words = [sys.executable, "-m", "ddptui.tui.web", "--inventory", str(inventory.resolve())]
    if runs_root is not None:
        words += ["--runs-root", str(runs_root.resolve())]
    if run is not None:
        words += ["--run", run]
    if control:
        words.append("--control")
    return shlex.join(words)


def url_host(host: str) -> str:
    """The bind address as a URL names it: this machine's name for every address (0.0.0.0),
    an IPv6 address in brackets."""
    if host in ("0.0.0.0", "::", ""):
        return socket.getfqdn()
    return f"[{host}]" if ":" in host else host


class TokenServer(Server):
    """textual-serve's server with every route under /<token>/ and a 403 for the rest. Its
    page builds each asset's and the socket's URL from the router, so they carry the token."""

    def __init__(self, command: str, host: str, port: int, token: str) -> None:
        # The page's links are absolute, on public_url: a name the browser can reach
        super().__init__(command, host=host, port=port, title="ddptui",
                         public_url=f"http://{url_host(host)}:{port}")  # fmt: skip
        self.token = token
        self.url = f"{self.public_url}/{token}/"
        self.pages: set[asyncio.Task[object]] = set()  # each open page's socket handler
        self.names = {n.lower() for n in (host, url_host(host), socket.gethostname(), "localhost")}
        self.script = browser.page_script(SCRIPT.read_text())  # no clipboard add-on

    async def _make_app(self) -> web.Application:
        outer = web.Application(middlewares=[self._guard])
        # before the sub-app's static route: the page's script as it is served here
        outer.router.add_get(f"/{self.token}/static/js/textual.js", self._page_script)
        outer.add_subapp(f"/{self.token}", await super()._make_app())
        outer.on_shutdown.append(self._end_pages)
        return outer

    async def _end_pages(self, app: web.Application) -> None:
        """Ctrl-C: each open page's handler is ended now (it ends the page's app, which
        detaches from its run), not after aiohttp's graceful wait (20 s and more), and while
        the loop runs: an app's process transport freed after it closed printed a traceback."""
        for task in self.pages:
            task.cancel()
        if self.pages:
            await asyncio.wait(self.pages, timeout=15)

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        first = request.path.split("/", 2)[1]
        if not hmac.compare_digest(first.encode(), self.token.encode()):
            raise web.HTTPForbidden(text="403: this page needs the URL `ddptui serve` printed\n")
        if not browser.known_host(request.host, self.names):
            raise web.HTTPForbidden(text=f"403: {request.host!r} is not this server's name\n")
        page = asyncio.current_task()
        if request.path.endswith("/ws") and page is not None:
            if not browser.same_origin(request.headers.get("Origin"), request.host):
                raise web.HTTPForbidden(text="403: a page from another origin\n")
            self.pages.add(page)
            page.add_done_callback(self.pages.discard)
        response = await handler(request)
        response.headers["Referrer-Policy"] = "no-referrer"  # the token stays on this page
        response.headers["Content-Security-Policy"] = PAGE_POLICY
        return response

    async def _page_script(self, request: web.Request) -> web.Response:
        return web.Response(text=self.script, content_type="application/javascript")

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One tab's dashboard, if it is within TABS_MAX (else the tab is told so) and the
        size it asks for is one."""
        width, height = (request.query.get(k, d) for k, d in (("width", "80"), ("height", "24")))
        if browser.size(width, height) is None:
            raise web.HTTPBadRequest(text="400: no such terminal size\n")
        if len(self.pages) <= TABS_MAX:
            return await super().handle_websocket(request)
        websocket = web.WebSocketResponse()
        await websocket.prepare(request)
        await websocket.send_bytes(
            f"\r\nddptui serve: {TABS_MAX} tabs are open already, the most it serves "
            "(each is a dashboard with SSH to every host): close one, then reload\r\n".encode()
        )
        await websocket.close()
        return websocket

    async def _process_messages(
        self, websocket: web.WebSocketResponse, app_service: AppService
    ) -> None:
        """textual-serve's, but each message checked first (tui/browser.py): one that is not
        what the page sends is dropped (a resize to "x" crashed the dashboard)."""
        async for frame in websocket:
            said = browser.message(frame.data) if frame.type == WSMsgType.TEXT else None
            if said is None:
                continue
            kind, data = said
            if kind == "stdin":
                await app_service.send_bytes(data.encode("utf-8"))
            elif kind == "resize":
                await app_service.set_terminal_size(*data)
            elif kind == "ping":
                await websocket.send_json(["pong", data])
            elif kind == "blur":
                await app_service.blur()
            else:
                await app_service.focus()

    def initialize_logging(self) -> None:
        super().initialize_logging()
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # a line per request

    async def on_startup(self, app: web.Application) -> None:
        """textual-serve prints its banner here, before the port is bound: nothing yet."""

    def serve(self, debug: bool = False) -> None:
        """textual-serve's own, but the URL is said once the port is bound, never before a
        bind that fails."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_exit)
        web.run_app(self._make_app(), host=self.host, port=self.port, loop=loop,
                    handle_signals=False, print=self._bound)  # fmt: skip

    def _bound(self, *_: object) -> None:
        print(f"ddptui serve: the dashboard at {self.url}", flush=True)


def serve(
    inventory: Path,
    *,
    runs_root: Path | None,
    run: str | None,
    host: str,
    port: int,
    control: bool,
) -> None:
    """Serve until Ctrl-C; prints the URL (with its token) and how to reach it."""
    token = secrets.token_urlsafe(24)
    server = TokenServer(app_command(inventory, runs_root, run, control), host, port, token)
    if host in ("127.0.0.1", "localhost", "::1"):
        here = url_host(host)
        print(f"from another machine: ssh -L {port}:{here}:{port} THIS-HOST, then the URL")
    else:
        print(
            f"ddptui serve: warning: exposed on {host}:{port}: anyone who can reach it and has "
            "the URL sees the dashboard (plain HTTP: the token crosses the network in clear)",
            file=sys.stderr,
        )
    mode = "control: launch, stop and restart allowed" if control else "read-only"
    print(f"{mode}; Ctrl-C stops serving (the runs go on)", flush=True)
    server.serve()


def main(argv: list[str] | None = None) -> int:
    """One browser's dashboard (textual-serve runs this with its web driver)."""
    p = argparse.ArgumentParser(prog="python -m ddptui.tui.web")
    p.add_argument("--inventory", type=Path, required=True)
    p.add_argument("--runs-root", type=Path)
    p.add_argument("--run")
    p.add_argument("--control", action="store_true")
    args = p.parse_args(argv)
    app = create_app(
        args.inventory,
        runs_dir=args.runs_root,
        start="attach" if args.run else None,
        run=args.run,
        read_only=not args.control,
        served=True,
    )
    return app.run() or 0


if __name__ == "__main__":
    sys.exit(main())
