"""How a fault of the local runtime decides when it fires (``FaultCount``), and the crash it raises in a
worker (``WorkerCrash``): shared by the worker's faults (``outbox.local.faults``) and AWS's
(``outbox.local.aws_faults``)."""

from __future__ import annotations

from dataclasses import dataclass


class WorkerCrash(BaseException):
    """The worker dies (out of memory, a deploy, SIGKILL): not an Exception, so no handler code catches
    it, and Lambda fails the whole invocation."""


@dataclass
class FaultCount:
    """Fires on the next ``remaining`` opportunities. Subclass and override ``take`` to decide otherwise."""

    remaining: int
    fired: int = 0

    def take(self, subject: str = "") -> bool:
        """Whether the fault fires at this opportunity; ``subject`` names it (a key, a tenant, an operation)."""
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        self.fired += 1
        return True
