"""Test tools for applications built on the outbox.

- ``outbox.testing.services``: ``FakeService`` and ``FakeServiceServer``, stand-ins for the remote APIs a
  subscription calls, with idempotency keys (no extra needed; the example's modules use them).
- ``outbox.testing.pipeline``: ``LocalPipeline``, your synthesized stack running on the local runtime,
  with emit, drain, injected crashes and failing handlers, and the inbox's claims and dead letters
  (``pip install "chained-outbox[local]"``).
- pytest fixtures, registered when the package is installed: ``outbox_pipeline`` boots your assembly
  (named by the ``outbox_assembly`` fixture, the ``--outbox-assembly`` option or ``OUTBOX_ASSEMBLY``).

This module imports nothing itself: the Lambda layer carries ``outbox.testing.services`` without moto.
"""
