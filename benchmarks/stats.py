"""Medians with their spread, and ratios measured side by side."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TypedDict


class Summary(TypedDict):
    """A figure over repetitions: the median, the smallest and the largest, and how many."""

    median: float
    low: float
    high: float
    n: int


def summary(values: Sequence[float]) -> Summary:
    if not values:
        raise ValueError("no values to summarise")
    return Summary(median=statistics.median(values), low=min(values), high=max(values), n=len(values))


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> Summary:
    """The ratio of each repetition's pair (measured in the same round), summarised."""
    if len(numerators) != len(denominators):
        raise ValueError("ratios need one denominator per numerator")
    return summary([n / d for n, d in zip(numerators, denominators, strict=True) if d])
