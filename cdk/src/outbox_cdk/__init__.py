"""AWS CDK constructs of the outbox: ``OutboxPipeline`` adds the whole pipeline to a stack of yours."""

from outbox_cdk.pipeline import OutboxPipeline

__all__ = ["OutboxPipeline"]
