"""The engine: every host checked, every run launched and followed, as typed events (events.py);
never imports Textual."""
