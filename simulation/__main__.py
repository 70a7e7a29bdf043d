"""``python -m simulation``: see ``simulation.cli``."""

from __future__ import annotations

from simulation.cli import main

raise SystemExit(main())
