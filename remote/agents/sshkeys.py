"""The keys `ssh` would offer a host, from ssh_config's IdentityFiles, as asyncssh takes them.

ssh offers the agent's keys (with IdentitiesOnly, only those an IdentityFile names) and each
IdentityFile that is a private key; it never falls back to ~/.ssh/id_* when the config names
other files. An IdentityFile names an agent key by its public half, which ssh finds in KEY.pub,
else in the key file itself: OpenSSH's own format keeps it in the clear even behind a passphrase.
"""

from __future__ import annotations

import base64
import os
import re
import struct

OPENSSH_KEY = re.compile(
    rb"-----BEGIN OPENSSH PRIVATE KEY-----(.+?)-----END OPENSSH PRIVATE KEY-----", re.S
)
MAGIC = b"openssh-key-v1\0"
KEY_FILE_MAX = 1 << 16  # bytes of a key file read: a private key is a few KiB


class NoFileKeys(list[str]):
    """asyncssh's client_keys when no IdentityFile is a private key it can read: it takes an
    empty list for "my default ~/.ssh/id_* keys" and None for "no keys, and no agent either";
    this one is an empty list that is true, so neither (the agent's keys stay)."""

    def __bool__(self) -> bool:
        return True


def public_half(path: str) -> str | bytes | None:
    """What names IdentityFile `path`'s key to the agent, as ssh finds it: KEY.pub (a path), else
    the private file's public blob (bytes); None if neither says (missing, or a PEM key behind a
    passphrase: ssh offers no agent key for it either)."""
    pub = path if path.endswith(".pub") else path + ".pub"
    if os.path.isfile(pub):
        return pub
    if path.endswith(".pub") or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            data = f.read(KEY_FILE_MAX)
    except OSError:
        return None
    return _openssh_public(data) or _pem_public(data)


def _openssh_public(data: bytes) -> bytes | None:
    """The public blob in an OpenSSH private key's header (PROTOCOL.key: magic, cipher, kdf,
    kdf options, the key count, then the first public key), encrypted or not."""
    found = OPENSSH_KEY.search(data)
    if found is None:
        return None
    try:
        raw = base64.b64decode(b"".join(found[1].split()), validate=True)
    except ValueError:
        return None
    if not raw.startswith(MAGIC):
        return None
    at = len(MAGIC)
    try:
        for _ in range(3):  # cipher name, kdf name, kdf options
            (size,) = struct.unpack_from(">I", raw, at)
            at += 4 + size
        (count, size) = struct.unpack_from(">II", raw, at)
    except struct.error:
        return None
    blob = raw[at + 8 : at + 8 + size]
    return blob if count >= 1 and size and len(blob) == size else None


def _pem_public(data: bytes) -> bytes | None:
    """An unencrypted PEM or PKCS#8 key's public blob (an encrypted one tells none)."""
    from ddptui.remote.agents.sshlib import asyncssh  # only for such keys: it is slow to import

    try:
        return asyncssh.import_private_key(data).public_data
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError, ValueError):
        return None
