"""How ddptui's host code reaches a host: the one way, nothing installed there by hand.

`command(python)` is the argv of the one SSH exec per host: a small boot (`python -S -c BOOT
HASH`: without its site, whose .pth files cost every command tens of ms of CPU in a venv) that
looks for the host code under its private state dir, keyed by the code's hash
(remote/host/state.py). If it is there, the agent starts at once; if not, the boot asks for it
(a NEED line) and the launcher writes `payload()` to its stdin: every module of remote/host/,
zlib'd JSON, which the boot keeps for the next time (or, where it cannot, runs from memory).
Python caches the compiled modules beside them as usual: the directory never changes.

The interpreter is the inventory's `python:` (a `~` in it is the host's home, expanded as the
login shell would), else any python3, told which one was missing so the checks can say so.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from functools import cache
from pathlib import Path

from ddptui.remote.host import protocol, wire

HOST = Path(__file__).parents[1] / "host"

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
# $1 is the interpreter. Without it, any python3 still starts the agent (told the path that
# was tried, after the other arguments), so the checks can name what is missing.
WRAPPER = (
    "py=$1; shift\n"
    + TILDE
    + """
if command -v "$py" >/dev/null 2>&1; then exec "$py" -S -c "$@"; fi
for alt in python3 python; do
    if command -v "$alt" >/dev/null 2>&1; then exec "$alt" -S -c "$@" "$py"; fi
done
echo "no python on this host (tried $py, python3, python)" >&2
exit 127"""
)
EXIT_NO_PYTHON = 127

# python3 >= 3.8. argv: HASH [MISSING_PYTHON]. The state dir must be this user's and closed to
# others at every level, or the code is asked for again and run from memory.
BOOT = """\
import os,sys
sys.path[:]=[p for p in sys.path if p]
h=sys.argv[1]
j=os.path.join
s=os.environ.get('XDG_STATE_HOME') or j(os.path.expanduser('~'),'.local','state')
r=j(s,'ddptui')
c=j(r,'code',h)
def own(p):
    try:s=os.lstat(p)
    except OSError:return False
    return s.st_uid==os.getuid() and s.st_mode&0o170022==0o40000
src=None
if not(all(map(own,(r,j(r,'code'),c,j(c,'ddph'))))and os.path.isfile(j(c,'ddph','agent.py'))):
    import json,zlib
    o=sys.stdout.buffer;o.write(b'NEED'+h.encode()+b'\\n');o.flush()
    def rd(n):
        b=b''
        while len(b)<n:
            x=os.read(0,n-len(b))
            if not x:os._exit(3)
            b+=x
        return b
    n=b''
    while not n.endswith(b'\\n'):n+=rd(1)
    src=json.loads(zlib.decompress(rd(int(n))))
    g={}
    exec(compile(src['state'],'ddph/state.py','exec'),g)
    c=g['install_code'](h,src) or g['from_memory'](src)
if c:sys.path.insert(0,c)
from ddph import agent
agent.main(c,src,sys.argv[2] if len(sys.argv)>2 else None)
""".replace("NEED", wire.NEED.decode())


@cache
def sources() -> dict[str, str]:
    """Every module of the host package, by name (`__init__` included)."""
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(HOST.glob("*.py"))}


@cache
def digest() -> str:
    text = json.dumps(sorted(sources().items())).encode()
    return hashlib.sha256(text).hexdigest()[:20]


def command(python: str, prefork: bool = True) -> list[str]:
    """The agent's argv (the transport quotes it for the login shell); prefork: False where no
    launch follows (Slurm's login node), so the agent answers without making one first."""
    argv = ["sh", "-c", WRAPPER, "ddptui-agent", python, BOOT, digest()]
    return argv if prefork else ["env", f"{protocol.NO_PREFORK}=1", *argv]


@cache
def payload() -> bytes:
    """The code, for a boot that asked for it: a length line, then zlib'd JSON."""
    data = zlib.compress(json.dumps(sources()).encode(), 6)
    return b"%d\n" % len(data) + data
