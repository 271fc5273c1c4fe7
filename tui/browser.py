"""What `ddptui serve` (tui/web.py) takes from a browser, checked before any of it reaches a
dashboard: the socket's messages (keys, mouse and pastes as text, a resize as two cell counts in
range), where the socket comes from (its Origin the page's own, its Host a name of this machine),
and the page's script without xterm.js's clipboard add-on (OSC 52 from a host's text would write
the viewer's clipboard). A message that is not one of these is dropped, never passed on: the
dashboard is the viewer's only, and a crash in it must not be a browser's to cause.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any
from urllib.parse import urlsplit

COLUMNS_MAX, ROWS_MAX = 1000, 500  # a terminal larger than any screen shows
STDIN_MAX = 1 << 16  # characters of keys, mouse reports or a paste in one message
PING_MAX = 64  # the page's ping carries a timestamp
# The page's own: `const s=new b.ClipboardAddon;this.terminal.loadAddon(s),` (minified).
CLIPBOARD_ADDON = re.compile(
    r"const (\w+)=new [\w$.]*ClipboardAddon;this\.terminal\.loadAddon\(\1\),"
)

Message = tuple[str, Any]  # ("stdin", text), ("resize", (columns, rows)), ("ping", data), ...


def message(text: str) -> Message | None:
    """A websocket text message as textual-serve's page sends it (`[type, data]`), checked;
    None for anything else (not JSON, an unknown type, a value of the wrong kind or size)."""
    try:
        envelope = json.loads(text)
    except ValueError:
        return None
    if not isinstance(envelope, list) or not envelope or not isinstance(envelope[0], str):
        return None
    kind, data = envelope[0], envelope[1] if len(envelope) > 1 else None
    if kind == "stdin" and isinstance(data, str) and len(data) <= STDIN_MAX:
        return kind, data
    if kind == "resize" and isinstance(data, dict):
        cells = size(data.get("width"), data.get("height"))
        return (kind, cells) if cells is not None else None
    if kind == "ping" and isinstance(data, str | int | float) and len(str(data)) <= PING_MAX:
        return kind, data
    if kind in ("blur", "focus"):
        return kind, None
    return None


def size(width: object, height: object) -> tuple[int, int] | None:
    """A terminal's columns and rows, whole numbers in range (JSON's or a query string's)."""
    cells = []
    for value, most in ((width, COLUMNS_MAX), (height, ROWS_MAX)):
        if isinstance(value, str) and value.isdigit() and len(value) <= 5:
            value = int(value)
        if type(value) is not int or not 1 <= value <= most:  # bool is an int: not a size
            return None
        cells.append(value)
    return cells[0], cells[1]


def known_host(header: str, names: set[str]) -> bool:
    """A request's Host names this machine: one of its names, or an address (a name an
    attacker's DNS points here, rebinding, is neither; the port is not checked: `ssh -L` may
    forward another)."""
    host = urlsplit(f"//{header}").hostname
    if not host:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return host.lower().rstrip(".") in names


def same_origin(origin: str | None, host: str) -> bool:
    """A websocket's Origin is the page's own (`http(s)://` + the Host it asked): a page from
    anywhere else that learned the URL cannot open it. None: not a browser (it holds the
    token; browsers always send one)."""
    if origin is None:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def page_script(script: str) -> str:
    """textual-serve's page script without the clipboard add-on; an unknown script (another
    textual-serve) is refused rather than served with it."""
    plain, found = CLIPBOARD_ADDON.subn("", script)
    if found != 1:
        raise ValueError("textual-serve's page script changed: its clipboard add-on not found")
    return plain
