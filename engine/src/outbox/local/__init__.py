"""The local runtime: the whole pipeline on one machine, on moto, configured from the synthesized template.

It provides what moto does not: the pipe (stream polling, filter, input template, group and dedup ids),
the Lambda SQS event source mapping (batches, partial failures, visibility, redrive), a virtual clock,
and fault injection. Handlers run unmodified, through boto3.
"""
