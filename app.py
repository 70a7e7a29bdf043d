#!/usr/bin/env python3
"""CDK entry point. Side-effect free apart from synthesis: no AWS, git or network calls."""

import sys

from stacks.app_factory import build_app
from stacks.settings import ContextError

try:
    app = build_app()
except ContextError as exc:  # what to pass, without a traceback: the CDK CLI prints this and stops
    sys.exit(f"error: {exc}")
app.synth()
