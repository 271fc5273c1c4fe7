"""Reaching hosts: ssh transports (OpenSSH's own resolution, jump hosts), each host's agent,
the fleet of them, the code shipped to them, and the link to a node's supervisor."""
