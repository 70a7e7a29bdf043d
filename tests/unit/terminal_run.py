"""Run a command with its stderr on a terminal (a pty), as a person runs it: what it wrote there, as bytes."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import subprocess
import termios
from collections.abc import Mapping, Sequence
from pathlib import Path


def on_a_terminal(
    command: Sequence[str], env: Mapping[str, str], *, columns: int = 80, cwd: Path | None = None
) -> bytes:
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    with subprocess.Popen(command, cwd=cwd, env=dict(env), stdout=subprocess.DEVNULL, stderr=follower) as run:
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError as exc:  # the other end closed: the command is done
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            said += chunk
        run.wait(timeout=120)
    os.close(leader)
    return said
