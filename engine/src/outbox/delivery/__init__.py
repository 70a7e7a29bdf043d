"""The durable consumer's delivery paths: each runs one (event, subscription) pair to an outcome.

- ``lease``: claim, run, complete (or release, or dead-letter) under a lease in the inbox; every pair can take it.
- ``direct``: a DynamoDB-only subscription's first delivery runs with no claim and commits its writes with a
  completion marker in one transaction; any history sends it to the lease path.
- ``ordered``: the gate of an ordered subscription (watermark, defer, place, wake), around the lease path.

``path`` says what a path is given (a ``Pair``) and returns (a ``DeliveryOutcome``); ``attempts`` is what every
path records the same way (a claim, a failure, a conflict); ``timing`` what an invocation's time allows. The
batch loop that chooses a path per pair is ``outbox.consumer``; the check of each message against the events
table before any path runs is ``log_check``.
"""
