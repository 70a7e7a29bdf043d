"""The durable consumer's delivery paths: each runs one (event, subscription) pair to an outcome.

A pair's ``Run`` (``run``) takes the transitions of its life (claim, run its handler, commit, fail, ...), each
recorded in the inbox and told to observers the same way on every path; ``runs`` is what every run of one
consumer shares. A path is a strategy over the run, and never calls another path:

- ``lease``: claim, run, commit (or release, or dead-letter) under a lease in the inbox; every pair can take it.
- ``direct``: a DynamoDB-only subscription's first delivery runs with no claim and commits its writes with a
  completion marker in one transaction; any history sends the run under a lease.
- ``ordered``: the gate of an ordered subscription (watermark, defer, place, wake).
- ``workflow``: a WORKFLOW pair handed to one durable execution.

``path`` says what a run is given (a ``Pair``) and ends with (a ``DeliveryOutcome``); ``batch`` is what one
invocation's batch carries (``carried``: its watermarks); ``timing`` what an invocation's time allows. The batch
loop that chooses a path per pair is ``outbox.delivery.consumer``; the check of each message against the events table
before any path runs is ``log_check``; ``left_out``, what a repair's message does with pairs a deploy left out;
``observers``, what each outcome of a run counts and logs (and a caller's own observers).
"""
