"""The job's parent inside a container: it starts the node's command, forwards
TERM, INT, HUP and QUIT to its process group, and ends it when stdin closes. The supervisor
holds the other end of stdin, and a SIGKILLed `docker run -i` / `podman run -i` client closes
it too, so a container never outlives the one who started it.

Runs on the image's own python (3.6 or later: keep the syntax old), standard library only:

    python3 shim.py [--cwd DIR] [--ready FILE] [--grace SECONDS] -- ARGV...

--ready FILE is made once the command has started: an exit after that is the job's, not the
container's failing to start. The shim ends as the job did: with its exit code, or killed by
the same signal (the runtime then says 128+N).
"""

import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
USAGE = "usage: shim.py [--cwd DIR] [--ready FILE] [--grace SECONDS] -- ARGV...\n"


def main(args):
    opts, argv = parse(args)
    if opts is None:
        sys.stderr.write(USAGE)
        return 2
    try:
        if opts["cwd"]:
            os.chdir(opts["cwd"])
        # its own process group: the whole job gets the signals and the final KILL
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        what = opts["cwd"] if exc.filename == opts["cwd"] else argv[0]
        sys.stderr.write("ddptui shim: cannot start {}: {}\n".format(what, exc.strerror))
        return 126 if exc.errno == errno.EACCES else 127
    for sig in FORWARDED:
        signal.signal(sig, lambda sig, _frame: _killpg(child.pid, sig))
    if opts["ready"]:
        open(opts["ready"], "w").close()
    ended = threading.Event()
    watch = threading.Thread(target=end_at_eof, args=(child.pid, opts["grace"], ended))
    watch.daemon = True  # stdin may stay open after the job's end
    watch.start()
    code = child.wait()
    ended.set()
    return code


def parse(args):
    """({cwd, ready, grace}, argv), or (None, None) for a bad command line."""
    opts = {"cwd": None, "ready": None, "grace": 5.0}
    while len(args) >= 2 and args[0] in ("--cwd", "--ready", "--grace"):
        opts[args[0][2:]], args = args[1], args[2:]
    if not args or args[0] != "--" or len(args) < 2:
        return None, None
    try:
        opts["grace"] = float(opts["grace"])
    except ValueError:
        return None, None
    return opts, args[1:]


def end_at_eof(pgid, grace, ended):
    """Read stdin to its end, then TERM the job, and KILL what is left after `grace` s."""
    while True:
        try:
            data = os.read(0, 65536)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
    _killpg(pgid, signal.SIGTERM)
    if not ended.wait(grace):
        _killpg(pgid, signal.SIGKILL)


def _killpg(pgid, sig):
    with contextlib.suppress(OSError):  # the group is gone already
        os.killpg(pgid, sig)


def exit_as(code):
    """Leave with the job's exit code, or die of the signal that ended it."""
    if code >= 0:
        sys.exit(code)
    with contextlib.suppress(OSError, ValueError):  # KILL has no handler to reset
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    sys.exit(128 - code)  # a signal that does not end a process by default


if __name__ == "__main__":
    exit_as(main(sys.argv[1:]))
