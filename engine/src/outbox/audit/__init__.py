"""Tamper evidence and the hourly pass: what proves the log was not rewritten behind the engine's back, and that
the stack still runs.

- ``outbox.audit.findings``: a tamper finding, read from the events table's stream;
- ``outbox.audit.table``: the audit table's rows (``AuditLog``): each tenant's anchor and its findings;
- ``outbox.audit.auditor``: the auditor, which records findings and anchors every tenant's verified head;
- ``outbox.audit.liveness``: the pipes' states, as the hourly pass checks them.

``from outbox.audit import AuditLog`` (and the table's other names) keeps working: they are imported on first
use (PEP 562), so a handler that needs only a finding does not load the table's code at cold start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from outbox import lazy_attributes

if TYPE_CHECKING:
    from outbox.audit.findings import Finding, FindingKind, finding_from_stream_record, iso_seconds
    from outbox.audit.table import RESET_PREFIX, AuditLog

# The names ``outbox.audit`` had when it was one module, and the module that defines each now.
_LAZY: dict[str, str] = {
    "AuditLog": "outbox.audit.table",
    "RESET_PREFIX": "outbox.audit.table",
    "Finding": "outbox.audit.findings",
    "FindingKind": "outbox.audit.findings",
    "finding_from_stream_record": "outbox.audit.findings",
    "iso_seconds": "outbox.audit.findings",
}


__getattr__ = lazy_attributes("outbox.audit", _LAZY, globals())

__all__ = ["RESET_PREFIX", "AuditLog", "Finding", "FindingKind", "finding_from_stream_record", "iso_seconds"]
