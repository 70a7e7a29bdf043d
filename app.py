#!/usr/bin/env python3
"""CDK entry point. Side-effect free apart from synthesis: no AWS, git or network calls."""

from stacks.app_factory import build_app

build_app().synth()
