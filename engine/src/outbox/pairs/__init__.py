"""A pair's life: the (event, subscription) pair's states and transitions as data (``machine``), the one answer
to what the deployed catalog does with a pair now (``deployed``), and the order of an ordered subscription's pairs
(``order``: watermarks, deferred pairs, and the ``wake_ups`` that send a deferred pair back to the queue). The
rows that hold a pair are ``outbox.inbox``'s."""

from __future__ import annotations

from outbox.pairs.deployed import DeployedCatalog, Placement
from outbox.pairs.machine import Act, Outcome, Route, Rule, State, Step, rule, state_of

__all__ = ["Act", "DeployedCatalog", "Outcome", "Placement", "Route", "Rule", "State", "Step", "rule", "state_of"]
