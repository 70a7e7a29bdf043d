"""A pipe's state as AWS reports it, where moto 5.2.5 does not (rule 13).

Rule 13, the state of a stopped pipe (M24; R11.1). moto moves a pipe one step along its list of states each
time DescribePipe reads it, and that list goes on from STOPPED to STARTING and RUNNING: a stopped pipe
starts itself again after two reads. In AWS a stopped pipe stays STOPPED until StartPipe. Here a pipe's
``CurrentState`` is its desired state, RUNNING or STOPPED: the runtime's pipes stop and start polling at the
call (``LocalRuntime.running_pipes``), so there is no STOPPING or STARTING to see locally.
"""

from __future__ import annotations

from moto.pipes.models import Pipe

from outbox.local.aws_fixes._patching import Patch


class PipesFixes:
    """Rule 13."""

    def patches(self) -> list[Patch]:
        def current_state(self: Pipe) -> str | None:
            return self.desired_state

        return [Patch(Pipe, "current_state", property(current_state), rule="M24")]
