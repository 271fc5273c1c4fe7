"""The engine: every host checked, every run launched and followed, as typed events (events.py);
never imports Textual."""

import warnings

# asyncssh names cryptography's deprecated algorithms (DSA) when it is imported, and each new
# cryptography release warns about them on stderr: a note for asyncssh's developers, not for
# someone whose one-line error would be buried under ten lines of it.
warnings.filterwarnings("ignore", message=r".* is deprecated", module=r"asyncssh(\.|$)")
