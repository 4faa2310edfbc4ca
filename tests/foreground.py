"""Starting a command as a terminal's foreground job, whose Ctrl-C tests send SIGINT to."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """`Popen(preexec_fn=...)`: SIGINT back to its default in the child, where Python then
    raises KeyboardInterrupt. A suite started in the background by a shell without job control
    (`pytest ... &`) passes SIGINT on ignored, and Python keeps ignoring it, as a background
    job should: the command would run on through a Ctrl-C test's signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
