"""Benchmarks of the outbox engine: what it costs to run, measured side by side with Powertools Idempotency.

``python -m benchmarks`` (``make bench``) runs each comparison in its own process, prints the tables and
writes ``benchmarks/RESULTS.md``. Each benchmark module has a ``run(...)`` function that returns plain,
JSON-ready figures; ``benchmarks.report`` turns them into tables. Timings are never asserted anywhere:
the machine is noisy, so every figure is a median over repetitions with its spread, and every
comparison is a ratio measured in the same run.
"""
