"""Regenerate catalog.json from the modules (``make catalog``); the contract test checks it is current.

catalog.json is also the record of every payload schema version ever declared: it is not rewritten while
today's models change a recorded version in a way the events stored with it cannot survive
(``outbox.log.schemas.compatibility_problems``), as a schema registry refuses an incompatible registration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from modules import build_catalog
from modules.services import Services
from outbox.log.schemas import compatibility_problems

CATALOG_FILE = Path(__file__).resolve().parents[1] / "catalog.json"


def recorded(path: Path) -> dict[str, Any]:
    """The committed catalog document, or an empty one before the first ``make catalog``."""
    if not path.exists():
        return {}
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def main() -> int:
    catalog = build_catalog(data_table="data", services=Services.fakes())  # the document calls no service
    document = catalog.document()
    problems = catalog.problems()
    for problem in problems:
        print(f"catalog contract: {problem}", file=sys.stderr)
    incompatible = compatibility_problems(recorded(CATALOG_FILE), document)
    for problem in incompatible:
        print(f"schema compatibility: {problem}", file=sys.stderr)
    if incompatible:
        print(f"{CATALOG_FILE.name} left as it is: it records the schemas of events already stored", file=sys.stderr)
        return 1
    CATALOG_FILE.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    print(
        f"wrote {CATALOG_FILE.name}: {len(document['event_types'])} event types, "
        f"{len(document['subscriptions'])} subscriptions"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
