"""Text from outside (a rank's lines, a host's words), made safe to show: both sides' one cleaner.

What a job prints may hold terminal commands: OSC 52 writes the clipboard of whoever shows it
(in a browser too, where xterm.js reads it), OSC 0 the window's title, DCS, APC, PM and SOS
strings reach the terminal's own parsers, CSI moves the cursor or clears the screen, ESC c
resets the terminal, and C1 controls (U+0080-U+009F, or the raw bytes 0x80-0x9F of a line that
was not UTF-8) are the same commands in one character. Every place that shows such text (the
dashboard, the headless commands, node 0's job.notify's environment) passes it through `clean`:
every escape sequence and control character goes, but newline and tab; `colours` keeps SGR
colours and carriage returns (a rank's line on a terminal, a bar redrawn). The bytes kept on
disk (rank-N.log, the spool) stay as written.

One pass of one regex in C, which cannot backtrack: a string sequence runs to its end (BEL or
ST) or to the next escape or newline, whichever comes first. Standard library only, python3 >=
3.8: node 0's supervisor imports it as `ddph.safetext`, the launcher as
`ddptui.remote.host.safetext`.
"""

from __future__ import annotations

import re

# the raw bytes 0x80-0x9F of a line that was not UTF-8, as the launcher decodes them
_C1_BYTES = "\udc80-\udc9f"
# OSC, DCS, SOS, PM, APC (7-bit and 8-bit): their string up to BEL or ST, else up to the next
# escape or the line's end (an ESC inside one ends it, as in a terminal).
_STRING = r"(?:\x1b[P\]X^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
_CSI = r"\x1b\[[0-?]*[ -/]*[@-~]?|\x9b[0-?]*[ -/]*[@-~]?"
_SGR_AHEAD = r"(?![0-9;:]*m)"  # a CSI that is not an SGR colour
_CONTROLS = "\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f" + _C1_BYTES  # ESC: above; \r: below
_PLAIN = re.compile("|".join((_STRING, _CSI, r"\x1b[ -/]*[0-~]?", "[\r" + _CONTROLS + "]")))
_COLOURS = re.compile(
    "|".join((
        _STRING,
        r"\x1b\[" + _SGR_AHEAD + r"[0-?]*[ -/]*[@-~]?|\x9b[0-?]*[ -/]*[@-~]?",
        r"\x1b(?!\[)[ -/]*[0-~]?",
        "[" + _CONTROLS + "]",
    ))
)  # fmt: skip
_SUSPECT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f" + _C1_BYTES + "]")


def clean(text: str, colours: bool = False) -> str:
    """`text` with every escape sequence and control character out, but newline and tab;
    with `colours`, SGR colours and carriage returns stay too."""
    if _SUSPECT.search(text) is None:  # the usual text: one scan in C
        return text
    return (_COLOURS if colours else _PLAIN).sub("", text)


def bounded(text: str, most: int) -> str:
    """`text` cut to `most` characters, `…` saying so."""
    return text if len(text) <= most else text[: most - 1] + "…"
