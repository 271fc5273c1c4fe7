"""Start or stop the ssh test hosts by hand: ``python scripts/testhosts.py up 4`` / ``down``.

The hosts keep running after ``up`` returns; ``down`` (or the next test session) removes them.
See tests/support/testhosts.py for what a host is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

from testhosts import DEFAULT_PREFIX, SUBNET, TestCluster, cluster_lock, teardown_all  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("n", type=int, nargs="?", default=4, help="number of hosts (up)")
    parser.add_argument("--root", type=Path, default=REPO / ".testhosts", help="keys, configs")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, help="namespace/bridge name prefix")
    parser.add_argument("--subnet", default=SUBNET, help="first three octets of the /24")
    parser.add_argument("--containers", action="store_true", help="podman on every host")
    args = parser.parse_args(argv)
    if args.action == "down":
        with cluster_lock(args.prefix):
            teardown_all(args.prefix)
        return 0
    cluster = TestCluster(
        args.n, root=args.root, prefix=args.prefix, subnet=args.subnet, containers=args.containers
    ).up()
    last = cluster.hosts[-1].index
    print(f"{args.n} hosts up: {', '.join(f'{h.name}={h.addr}' for h in cluster.hosts)}")
    print(f"ssh -F {cluster.ssh_config} node0 hostname")
    if cluster.image:
        print(f"image {cluster.image} (podman on every host)")
    print(
        f'PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS_APPEND="-F {cluster.ssh_config}" '
        f"pdsh -w node[0-{last}] hostname"
    )
    return 0  # exiting releases the lock; the sshds live on


if __name__ == "__main__":
    sys.exit(main())
