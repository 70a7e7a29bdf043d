"""The bodies a broken or hostile sender may put in a tenant's group, beside the engine's real messages.

Each must become a poison pill, recorded once and acknowledged, and never block the real events behind it.
The schedule picks among them by name; the driver sends them. Kept apart from both (and from the
simulated catalog) so that neither imports the other for a table of strings.
"""

from __future__ import annotations

import json

ALTERED_EVENT = "an altered event"
MALFORMED_BODIES: dict[str, str] = {
    "empty": " ",  # SQS takes no empty body: one space is as empty as a sender can send
    "not json": "{not json",
    "a json array": "[1, 2, 3]",
    "plain json": json.dumps({"id": "x", "type": "sim.item_created", "payload": {}}),
    "wrong type tags": json.dumps({"kind": {"S": "EVENT"}, "seq": {"N": "abc"}, "tenant": {"X": "t"}}),
    "a head row": json.dumps({"pk": {"S": "TENANT#t0#HEAD"}, "sk": {"S": "HEAD"}, "kind": {"S": "HEAD"}}),
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "a lone surrogate": '{"kind": {"S": "\\ud800"}}',
    # Built by the driver from a real event row of the tenant, one payload field changed, hash kept.
    ALTERED_EVENT: "",
}
