"""Prints, as one JSON line, its arguments and the environment variables named by DDPTUI_SHOW."""

import json
import os
import sys

names = os.environ.get("DDPTUI_SHOW", "").split(",")
print(json.dumps({"argv": sys.argv[1:], "env": {n: os.environ.get(n) for n in names if n}}))
