"""How ddptui's host side reaches a host: its modules travel in the SSH exec, nothing installed.

`command(python)` is the argv to exec; `payload(cmd)` is what to write to its stdin first: the
host package's sources (zlib'd JSON) and the command for `remote/host/main.py`. The host reads
exactly that many bytes with os.read, so whatever follows on stdin (the conversation with the
supervisor) stays unread for the relay.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

HOST = Path(__file__).parent / "host"
MODULES = (
    "netif",
    "procs",
    "wire",
    "spool",
    "hub",
    "linebuf",
    "daemon",
    "main",
)  # dependencies first
SOURCES = [(name, (HOST / f"{name}.py").read_text()) for name in MODULES]

# Registers the sources as the package `ddph` (relative imports between them work).
LOADER = """\
import json,os,sys,types,zlib
def _load(mods):
    pkg=types.ModuleType('ddph');pkg.__path__=[];sys.modules['ddph']=pkg
    for name,src in mods:
        m=types.ModuleType('ddph.'+name);m.__package__='ddph';sys.modules[m.__name__]=m
        exec(compile(src,'ddph/'+name+'.py','exec'),m.__dict__);setattr(pkg,name,m)
    return pkg
"""
BOOT = (
    LOADER
    + """\
def _read(n):
    b=b''
    while len(b)<n:
        c=os.read(0,n-len(b))
        if not c:sys.exit(3)
        b+=c
    return b
n=b''
while not n.endswith(b'\\n'):n+=_read(1)
p=json.loads(zlib.decompress(_read(int(n))))
code=_load(p['modules']).main.main(p['cmd'])
sys.stdout.flush()
os._exit(code or 0)
"""
)


# sh, on the host: $py as the login shell reads an unquoted word: a leading `~` or `~user` is
# that home. Every argv reaches the host quoted (shlex.join), so the shell never expands it.
TILDE = """case $py in
"~" | "~/"*) py=$HOME${py#"~"} ;;
"~"[A-Za-z_]*)
    u=${py%%/*}; u=${u#"~"}
    case $u in
    *[!A-Za-z0-9._-]*) ;;
    *) eval "h=~$u"; [ "$h" = "~$u" ] || py=$h${py#"~$u"} ;;
    esac ;;
esac"""
EXPAND_EXEC = "py=$1; shift\n" + TILDE + '\nexec "$py" "$@"'


def command(python: str) -> list[str]:
    """`python -c BOOT`; a `~` path goes through sh, to be expanded there (ssh's way)."""
    if python.startswith("~"):
        return ["sh", "-c", EXPAND_EXEC, "ddptui", python, "-c", BOOT]
    return [python, "-c", BOOT]


def payload(cmd: dict[str, Any]) -> bytes:
    data = zlib.compress(json.dumps({"modules": SOURCES, "cmd": cmd}).encode(), 6)
    return b"%d\n" % len(data) + data
