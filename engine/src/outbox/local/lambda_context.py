"""A Lambda-like invocation context whose remaining time follows the virtual clock."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass
class LocalLambdaContext:
    function_name: str
    timeout: timedelta
    clock: Callable[[], datetime]
    memory_limit_in_mb: int = 256
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    invoked_function_arn: str = ""
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""

    def __post_init__(self) -> None:
        self._deadline = self.clock() + self.timeout
        if not self.invoked_function_arn:
            self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"

    @property
    def deadline(self) -> datetime:
        """When Lambda stops the invocation: its start plus the function's timeout."""
        return self._deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self.clock()).total_seconds() * 1000))
