"""ddptui's exit statuses (docs/usage.md: "exit status"), apart so the CLI needs nothing heavier."""

EXIT_OK = 0  # every rank succeeded; check: nothing failed
EXIT_FAILED = 1  # a rank failed, a check failed, or the checks refused the launch
EXIT_USAGE = 2  # bad usage, a mistake in the inventory, an unusable run directory
EXIT_UNREACHABLE = 3  # a host could not be reached or logged into
EXIT_REFUSED = 75  # its GPUs are held (or busy): nothing started; sysexits' EX_TEMPFAIL, try later
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM, SIGHUP or a closed output: every host was stopped
