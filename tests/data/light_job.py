"""A light job for the scale test (the `env` launch style, no torch): each node says hello and
ends; with FAIL_NODE set, that node fails while the others wait to be stopped."""

import os
import sys
import time

node = os.environ["NODE_RANK"]
print(f"hello from node {node} of {os.environ['WORLD_SIZE']} ({os.environ['MASTER_ADDR']})")
if os.environ.get("FAIL_NODE") == node:
    time.sleep(float(os.environ.get("FAIL_AFTER", "0")))
    print(f"node {node} fails on purpose", file=sys.stderr)
    sys.exit(3)
time.sleep(float(os.environ.get("STAY", "0")))
