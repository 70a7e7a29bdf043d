"""Regenerate catalog.json from the modules (``make catalog``); the contract test checks it is current."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from modules import build_catalog
from modules.services import Services

CATALOG_FILE = Path(__file__).resolve().parents[1] / "catalog.json"


def main() -> int:
    catalog = build_catalog(data_table="data", services=Services.fakes())  # the document calls no service
    problems = catalog.problems()
    for problem in problems:
        print(f"catalog contract: {problem}", file=sys.stderr)
    CATALOG_FILE.write_text(json.dumps(catalog.document(), indent=2, sort_keys=True) + "\n")
    print(
        f"wrote {CATALOG_FILE.name}: {len(catalog.document()['event_types'])} event types, "
        f"{len(catalog.document()['subscriptions'])} subscriptions"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
