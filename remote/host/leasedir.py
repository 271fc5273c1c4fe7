"""The GPU leases' directory on a host, shared by every user: a lock file per GPU, a ticket per
launch waiting for GPUs, and the host's own lock around every look and take.

    /dev/shm/ddptui/            mode 1777: every user may add files, only the owner remove them
      GPU-<UUID>                a GPU's lease (mode 0666): an flock held by the run's supervisor;
                                the holder's record in it (JSON), cleared when given back
      queue-<key>-<run>-<node>  a launch waiting (mode 0644): an flock held by its waiter while
                                it waits; its key orders the queue, the same on every host
      .lock                     the host's lock: one look-or-take at a time
      .counter                  the highest key handed out here (the queue's Lamport clock)

An flock is dropped by the kernel with its holder (SIGKILL included): a lease, a ticket or the
host's lock never outlives its process, and /dev/shm (a tmpfs) forgets all at a reboot. A gpu
file whose flock is free but whose record is left names a run that died holding it. Files are
keyed by a GPU's UUID, never its index: hosts that share a filesystem (or /dev/shm) share the
directory without sharing GPUs. DDPTUI_LEASE_DIR names another directory (every user of a host
must then agree on it). python3 >= 3.8, standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pwd
import re
import stat
import time

ROOT = "/dev/shm/ddptui"
RECORD_MAX = 4096  # bytes of a record read: what another user wrote there is data, bounded
LOCK_WAIT_S = 5.0  # a host's lock held longer than this: its holder is stuck (SIGSTOP)
SHARED_DIR = 0o1777
SHARED_FILE = 0o666
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class LeaseError(Exception):
    """Why this host's leases cannot be looked at or taken: one line, for the user."""


def root():
    return os.environ.get("DDPTUI_LEASE_DIR") or ROOT


def user_name(uid=None):
    uid = os.getuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def user_of(pid):
    """Whose a process is, as this host can tell ("?": another container's, or gone)."""
    try:
        return user_name(os.stat("/proc/{}".format(pid)).st_uid)
    except OSError:
        return "?"


def _describe(st):
    return "{}'s, mode {:04o}".format(user_name(st.st_uid), stat.S_IMODE(st.st_mode))


def open_dir(path=None):
    """The directory, made shared if it is not there; an fd on it. A directory that is not
    shared (another user's, not 1777), a symlink or a file in its place: a LeaseError."""
    path = path or root()
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
        os.chmod(path, SHARED_DIR)  # never through the umask: every user's launches meet here
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise LeaseError("the lease directory {}: {}".format(path, _why(exc))) from None
    st = os.fstat(fd)
    if stat.S_IMODE(st.st_mode) != SHARED_DIR:
        if st.st_uid == os.getuid():
            os.fchmod(fd, SHARED_DIR)
        elif stat.S_IMODE(st.st_mode) & 0o1003 != 0o1003:
            os.close(fd)
            raise LeaseError(
                "the lease directory {} is {}: every user must be able to add files there "
                "(mode 1777); its owner or root may remove it".format(path, _describe(st))
            )
    return fd


def _why(exc):
    if exc.errno == errno.ELOOP:
        return "a symlink is in its place (not followed)"
    if exc.errno == errno.ENOTDIR:
        return "a file is in its place, not a directory"
    return exc.strerror or str(exc)


@contextlib.contextmanager
def host_lock(dir_fd, wait=LOCK_WAIT_S):
    """The host's lock, around one look or take: held for milliseconds; a holder stuck past
    `wait` seconds is a LeaseError, never a hang."""
    fd = open_shared(dir_fd, ".lock")
    deadline = time.monotonic() + wait
    try:
        while not try_lock(fd):
            if time.monotonic() > deadline:
                raise LeaseError("the host's lease lock has been held for {:g} s by a stuck "
                                 "process (stopped?)".format(wait))  # fmt: skip
            time.sleep(0.005)
        yield
    finally:
        os.close(fd)


def open_shared(dir_fd, name, make=True):
    """A shared file of the directory (mode 0666), made if missing (else None), opened for
    reading and writing; never through a symlink, never a file that is not regular or that
    this user cannot write (another user's, not shared): a LeaseError naming it and whose."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except FileNotFoundError:
            if not make:
                return None
            _make_shared(dir_fd, name)
            continue
        except OSError as exc:
            raise LeaseError("{}: {}".format(name, _unusable(dir_fd, name, exc))) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise LeaseError("{}: not a regular file ({}): not used".format(name, _describe(st)))
        return fd
    raise LeaseError("{}: made and removed again meanwhile".format(name))


def _make_shared(dir_fd, name):
    """Made whole (0666 whatever the umask) under a private name, then linked into place: no
    other user ever opens it half made; one made meanwhile by another wins."""
    tmp = ".{}.{}".format(name, os.getpid())
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=dir_fd)  # fmt: skip
    try:
        os.fchmod(fd, SHARED_FILE)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        raise LeaseError("{}: cannot be made: {}".format(name, exc.strerror)) from None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)


def _unusable(dir_fd, name, exc):
    if exc.errno == errno.ELOOP:
        return "a symlink (not followed): its owner or root may remove it"
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return exc.strerror or str(exc)
    return "{} ({}): its owner or root may remove it".format(exc.strerror, _describe(st))


def try_lock(fd, shared=False):
    """The flock, if free now: True. Never waits."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(fd):
    fcntl.flock(fd, fcntl.LOCK_UN)


def read_record(fd):
    """The JSON object a file holds (at most RECORD_MAX bytes), or None: empty, or not one."""
    try:
        data = os.pread(fd, RECORD_MAX + 1, 0)
    except OSError:
        return None
    if not data.strip() or len(data) > RECORD_MAX:
        return None
    try:
        found = json.loads(data.decode("utf-8"))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def write_record(fd, record, name="the lease file"):
    data = json.dumps(record, separators=(",", ":")).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError as exc:
        raise LeaseError("{} cannot be written: {}".format(name, exc.strerror)) from None


def clear(fd):
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)


def gpu_file(uuid):
    """A GPU's lease file: named by its UUID (GPU-...), never anything else nvidia-smi said."""
    if not uuid.startswith("GPU-") or not _NAME.match(uuid):
        raise LeaseError("nvidia-smi names a GPU {!r}: not a GPU UUID".format(uuid[:80]))
    return uuid


def names(dir_fd, prefix):
    """The directory's files of ours that start with prefix (junk and others' names left)."""
    try:
        found = os.listdir(dir_fd)
    except OSError:
        return []
    return sorted(n for n in found if n.startswith(prefix) and _NAME.match(n))


# -- the queue -----------------------------------------------------------------------------------


def counter(dir_fd, at_least=0):
    """The host's highest key handed out, raised to at_least (under the host's lock)."""
    fd = open_shared(dir_fd, ".counter")
    try:
        found = read_record(fd) or {}
        value = found.get("key") if isinstance(found.get("key"), int) else 0
        if at_least > value:
            write_record(fd, {"key": at_least}, "the queue's counter")
            value = at_least
        return value
    finally:
        os.close(fd)


def ticket_name(key, run_id, node):
    return "queue-{:012d}-{}-n{}".format(key, run_id, node)


def new_ticket(dir_fd, key, run_id, node, record):
    """This launch's place in the queue: its file, flocked for as long as it waits (the fd)."""
    name = ticket_name(key, run_id, node)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        raise LeaseError("{}: cannot be made: {}".format(name, exc.strerror)) from None
    try:
        os.fchmod(fd, 0o644)  # every user reads the queue; only its owner removes it
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_record(fd, record, "its queue ticket")
    except BaseException:
        drop_ticket(dir_fd, name, fd)
        raise
    return name, fd


def drop_ticket(dir_fd, name, fd):
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)
    os.close(fd)


def tickets(dir_fd):
    """The queue: (key, record) of each live ticket (its waiter holds its flock), in order.
    A ticket whose waiter is gone is removed if it is ours, else passed over."""
    found = []
    for name in names(dir_fd, "queue-"):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            if try_lock(fd, shared=True):  # nobody waits on it: its waiter left
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)  # ours alone (the sticky directory)
                continue
            record = read_record(fd)
        finally:
            os.close(fd)
        key = name.split("-")[1]
        if record is not None and key.isdigit():
            found.append((int(key), name, record))
    return [(key, record) for key, _, record in sorted(found, key=lambda f: f[:2])]
