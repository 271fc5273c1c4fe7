"""asyncssh, imported without its slow look for liboqs.

asyncssh looks for liboqs (post-quantum key exchange) at import with ctypes.util.find_library,
which on Linux runs `ldconfig -p`, then gcc and ld, for two names: a cost every ddptui command
paid before the first host is reached (docs/benchmarks.md). A library that the dynamic loader cannot
find by name could not be loaded anyway, so where neither its cache nor its paths hold liboqs, the
answer is known at once; where they do, ctypes looks as it always did.
"""

from __future__ import annotations

import ctypes.util
import glob
import os
import sys

LIBOQS = ("oqs", "liboqs")
LOADER_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")  # searched without the cache


def liboqs_loadable() -> bool:
    try:
        with open("/etc/ld.so.cache", "rb") as f:
            if b"liboqs.so" in f.read():
                return True
    except OSError:
        pass
    dirs = [*os.environ.get("LD_LIBRARY_PATH", "").split(":"), *LOADER_DIRS]
    return any(glob.glob(os.path.join(d, "liboqs.so*")) for d in dirs if d)


def _import() -> None:
    real = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        return None if name in LIBOQS and not liboqs_loadable() else real(name)

    if sys.platform.startswith("linux"):  # elsewhere find_library runs no tools
        ctypes.util.find_library = find_library
    try:
        import asyncssh  # noqa: F401
    finally:
        ctypes.util.find_library = real


_import()

import asyncssh as asyncssh  # noqa: E402  (the module _import() loaded)
