"""Text from outside (the inventory, a host, a rank) shown as it is, never read as markup.

Textual reads a `str` given to a border title, a `Static`, a `Label` or a table cell as markup:
`[/x]` in a script's name raised MarkupError (the app exited 1, the run got no summary), and
`[@click=app.quit]` in a host's message became a clickable action. `Content` and Rich `Text`
are taken as they are; notifications are shown plain by the app itself (Dashboard.notify).
Text from outside never carries a terminal's command either (tui/dashboard/messages.py).
"""

from __future__ import annotations

from textual.content import Content

from ddptui.remote.host.safetext import clean


def plain(text: str) -> Content:
    """`text` for a title, a Static or a Label: shown as written, less any escape sequence or
    control character (remote/host/safetext.py)."""
    return Content(clean(text))
