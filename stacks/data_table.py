"""The data table: the one table where the application modules keep their entities and projections."""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct

from outbox_cdk.table_defaults import protected_table

# Partition keys the example modules write (modules/): one entity type per prefix, string pk and sk.
ENTITY_PARTITION_PATTERNS: Final = (
    "ORDER#<id>",
    "PAYMENT#<id>",
    "PROFILE#<id>",
    "CONTACTADDRESS#<id>",
    "SALES#<tenant>",  # a projection, written by subscribers rather than by a request
)


class DataTable(Construct):
    """``self.table`` holds the modules' entities; its stream feeds the record-change (BEST_EFFORT) lane.

    The stream carries new and old images: an INSERT has only the new one, a REMOVE only the old one, a
    MODIFY both, and a row-change subscriber may need either side. It is the application's state, so it
    is protected like every table of the app (``table_defaults``).
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = protected_table(self, "Table", stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES)

    @property
    def stream_arn(self) -> str:
        arn = self.table.table_stream_arn
        assert arn is not None, "the data table is created with a stream"
        return arn

    def grant_read_write(self, grantee: iam.IGrantable) -> None:
        """Item reads and writes, transactions included (a handler's writes commit with its completion)."""
        self.table.grant_read_write_data(grantee)
