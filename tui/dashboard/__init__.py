"""The dashboard: a Textual app rendering the engine's events (`app.py`), made of widgets that
own their state: the hosts table, the log pane, the findings, the status bar and banner."""
