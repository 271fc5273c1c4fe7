"""What a run leaves on this machine: its directory (rank logs, events, summary), and the history of
runs."""
