"""``python -m outbox.cli``: the ``outbox`` command."""

from outbox.cli import run

run()
