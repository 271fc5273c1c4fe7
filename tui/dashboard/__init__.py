"""The dashboard: a Textual app rendering the engine's events (`app.py`), made of widgets that
own their state (the hosts table, the log pane, the findings, the status bar and banner) and
controllers that own the rest: the inventory and the run (control), what its events mean for
the user (course), the dashboard's own connections (glance)."""
