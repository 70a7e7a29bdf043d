"""The BEST_EFFORT lane: row changes of the data table (``changes``, as the record-change pipe forwards them)
and the one consumer that dispatches them (``consumer``: no order, no inbox; a failing handler fails its
message, which SQS retries and finally moves to its dead-letter queue)."""
