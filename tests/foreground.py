"""Starting a command as a terminal's foreground job, whose Ctrl-C tests send SIGINT to."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence


def default_sigint() -> None:
    """`Popen(preexec_fn=...)`: SIGINT back to its default in the child, where Python then
    raises KeyboardInterrupt. A suite started in the background by a shell without job control
    (`pytest ... &`) passes SIGINT on ignored, and Python keeps ignoring it, as a background
    job should: the command would run on through a Ctrl-C test's signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_foreground(command: Sequence[str], **popen) -> subprocess.Popen:
    """`command` started as a terminal's foreground job: its own process group (so the test
    can signal the group as a Ctrl-C does), SIGINT at its default (`default_sigint`), output
    captured as text."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
        **popen,
    )
