"""Who a peer of the run's hub is: the keys each may prove, and the host that proved another's.

Every node and hot spare's standby has its own key (remote/host/channel.py: `node_key`, from the
run's secret, which only the launcher and node 0 hold). The hub takes for node k its own key, or
the key of the spare it awaits in k's place: a launcher's ticket, or the standby it chose for k.
A peer that proves none of them for the node it claims may have proved another's: that host is
named, once, and refused all the same.
"""

from __future__ import annotations

import hmac
import time

from . import channel

OWN, SPARE = "own", "spare"  # who a proof makes a peer: the node itself, or a spare in its place
SEARCH_EVERY_S = 0.05  # a refused proof is matched against every key at most this often: a
# flood of strangers costs the door little, a host claiming another's node retries each second

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Iterable, Sequence


class Identities:
    """The keys of one run's peers: names are the nodes', then the hot spares' (by slot)."""

    def __init__(self, secret: str, names: Sequence[str], standbys: Sequence[str] = ()) -> None:
        self.nodes = len(names)
        self.names = [*names, *standbys]
        self.own = [channel.node_key(secret, k) for k in range(len(self.names))]
        self.named: set[tuple[int, int]] = set()  # (host's slot, node claimed): said already
        self.searched = 0.0

    def keys(
        self, node: int, ticket: str | None = None, slots: Iterable[int] = ()
    ) -> list[tuple[str, str]]:
        """What a peer claiming `node` may prove, as (who, key): its own key, and a spare's
        (the launcher's ticket, each hot spare's standby the hub chose for it)."""
        spares = [channel.spare_key(self.own[slot], node) for slot in slots]
        return [(OWN, self.own[node]), *((SPARE, key) for key in [ticket, *spares] if key)]

    def impostor(self, node: int, hub_nonce: bytes, peer_nonce: bytes, proof: bytes) -> str | None:
        """Why a peer claiming `node` was refused, if it proved another's own key: words naming
        that host (None: a stranger, one named already, or no search due yet)."""
        now = time.monotonic()
        if now - self.searched < SEARCH_EVERY_S:
            return None
        self.searched = now
        for slot, key in enumerate(self.own):
            if slot != node and hmac.compare_digest(
                proof, channel.peer_proof(key, hub_nonce, peer_nonce, node)
            ):
                if (slot, node) in self.named:
                    return None
                self.named.add((slot, node))
                return "{} tried to join the run's hub as {}: refused".format(
                    self._who(slot), self._who(node)
                )
        return None

    def _who(self, slot):
        if slot < self.nodes:
            return "{} (node {})".format(self.names[slot], slot)
        return "hot spare {}".format(self.names[slot])
