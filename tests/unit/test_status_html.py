"""The status page (``outbox.ops.status_html``) from status values, without a browser: what it says, that every
problem carries its command, that data is escaped, that it has no script, and that its lines fit its box
(tests/e2e/test_dashboard_widget.py looks at it in a browser)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from html.parser import HTMLParser

from outbox.inbox import DeadLetter
from outbox.ops import FailureGroup, QueueDepth, Status, TenantStatus
from outbox.ops.status_html import LINE_PX, PAD_PX, Box, document, render
from outbox.ops.workflows import RunningWorkflow

NOW = datetime(2026, 5, 1, 12, 0, 3, tzinfo=UTC)
QUEUES = ("durable", "durable-dlq", "relay-pipe-dlq", "tamper", "tamper-dlq", "tamper-pipe-dlq", "anchoring-dlq")
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def calm(name: str, anchored_at: str | None = "2026-05-01T11:00:03+00:00") -> TenantStatus:
    return TenantStatus(name, True, 9, None, 0, anchor_seq=9 if anchored_at else None, anchored_at=anchored_at)


def status(tenants: list[TenantStatus], **depths: int) -> Status:
    queues = {name: QueueDepth(depths.get(name.replace("-", "_"), 0), 0, None) for name in QUEUES}
    return Status(queues, {"relay": "RUNNING", "tamper": "RUNNING"}, tenants, 0)


def group(where: str = "TerminalError: tag registry said no", tenants: int = 1) -> FailureGroup:
    letter = DeadLetter(
        tenant="acme",
        event_id="01HZX",
        event_seq=3,
        event_type="order.paid",
        subscription="pet_tag.mark_ordered",
        reason="terminal",
        error_type="TerminalError",
        error=where,
        attempts=1,
        dead_at="2026-05-01T11:59:00+00:00",
        resolved=None,
    )
    names = [f"t{n}" for n in range(tenants)]
    return FailureGroup(
        "g-0123456789", "pet_tag.mark_ordered", "terminal", "TerminalError", where, 2, names, "a", "b", letter
    )


class Text(HTMLParser):
    """The page's text, as a reader sees it (no markup), and its elements' names and attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if not self._in_style:
            self.parts.append(data)


def read(page: str) -> Text:
    parser = Text()
    parser.feed(page)
    return parser


def lines(page: str) -> int:
    """What the page's height is made of: its one-line rows."""
    return page.count('<div class="line') + page.count("<tr>")


def test_a_healthy_outbox_says_so_with_the_last_anchoring_pass() -> None:
    text = "".join(read(render(status([calm("acme"), calm("zoo")]), [], now=NOW)).parts)
    assert "Healthy: nothing needs an operator" in text
    assert "every chain intact" in text
    assert "last anchoring pass: 2026-05-01 11:00:03 UTC (60 minutes ago, the newest anchor)" in text
    assert "Dead-letter queues: all 5 empty" in text
    assert "Tenants (2)" in text


def test_without_any_anchor_it_says_there_was_no_anchoring_pass() -> None:
    text = "".join(read(render(status([calm("acme", anchored_at=None)]), [], now=NOW)).parts)
    assert "last anchoring pass: none has anchored a tenant yet" in text
    assert "0 of 1 anchored" in text


def test_every_problem_is_shown_with_its_command() -> None:
    broken = replace(calm("acme"), chain_intact=False, first_broken_seq=3, break_reason="altered", dead_letters=2)
    overdue = RunningWorkflow("acme", "shipping.ship", "01HZX", "arn:aws:lambda:x", "2026-04-01T00:00:00Z", 9e5, True)
    report = replace(status([broken, calm("zoo")], durable_dlq=2), poison_pills_today=1, workflows=[overdue])
    text = "".join(read(render(report, [group()], now=NOW)).parts)
    assert "5 problems need attention" in text
    for problem in report.needs_attention():
        assert problem.repair in text, problem
    assert "broken at seq 3 (altered)" in text
    assert "outbox replay --group g-0123456789 --dry-run" in text
    assert "Other tenants (1)" in text


def test_what_comes_from_data_is_escaped_and_the_page_has_no_script() -> None:
    page = document(render(status([replace(calm("acme"), dead_letters=1)]), [group(HOSTILE)], now=NOW))
    parsed = read(page)
    assert HOSTILE in "".join(parsed.parts)  # shown as text
    assert {tag for tag, _ in parsed.tags} <= {"html", "head", "meta", "title", "style", "body", "div", "span"} | {
        "table",
        "colgroup",
        "col",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "code",
    }
    attributes = {name for _, attrs in parsed.tags for name, _ in attrs}
    assert attributes <= {"lang", "charset", "class", "style", "title", "colspan"}
    assert "javascript:" not in page.lower()


def test_a_long_list_ends_with_how_many_more_and_the_command_and_the_page_fits_its_box() -> None:
    tenants = [replace(calm(f"t{n:02}"), dead_letters=1) for n in range(40)]
    box = Box(width=1000, height=300)
    page = render(status(tenants), [group(tenants=40)] * 12, now=NOW, box=box)
    text = " ".join(" ".join(read(page).parts).split())
    assert re.search(r"and \d+ more: outbox status", text)
    assert re.search(r"and \d+ more: outbox dead-letters groups", text)
    assert lines(page) == box.lines == (300 - 2 * PAD_PX) // LINE_PX


def test_a_narrow_box_says_each_row_in_a_line_and_its_command_in_the_next() -> None:
    broken = replace(calm("acme"), chain_intact=False, first_broken_seq=3, break_reason="altered", dead_letters=2)
    box = Box(width=588, height=369)
    page = render(status([broken, calm("zoo")], durable_dlq=2), [group()], now=NOW, box=box)
    # Each line's title holds its whole text.
    said = [dict(attrs)["title"] for tag, attrs in read(page).tags if tag == "div" and "line" in str(dict(attrs))]
    assert "<table>" not in page
    assert said[said.index("Tenants needing attention (1 of 2)") + 1 :][:4] == [
        "acme: chain broken at seq 3 (altered) · anchor seq 9, 2026-05-01 11:00:03 UTC",
        "outbox verify-chain --tenant acme; outbox findings --tenant acme",
        "acme: 2 dead letters",
        "outbox dead-letters list --tenant acme; after the fix, outbox replay --tenant acme",
    ]
    assert lines(page) <= box.lines


def test_a_box_too_small_for_the_tables_still_says_how_many_problems_and_where_to_look() -> None:
    tenants = [replace(calm(f"t{n:02}"), dead_letters=1) for n in range(3)]
    page = render(status(tenants), [], now=NOW, box=Box(height=2 * LINE_PX + 2 * PAD_PX))
    assert lines(page) == 2
    assert "3 problems need attention" in "".join(read(page).parts)


def running(count: int, overdue: int = 0) -> list[RunningWorkflow]:
    """``count`` workflows, oldest first, handed an hour apart; the first ``overdue`` past their bound."""
    return [
        RunningWorkflow(
            f"t{n % 3}",
            "shipping.ship_order",
            f"01HZX{n:021}",
            f"arn:aws:lambda:us-east-1:1:function:ship:live/durable-execution/{n}/x",
            f"2026-04-{1 + n:02}T12:00:03+00:00",
            (30 - n) * 86_400,
            overdue=n < overdue,
        )
        for n in range(count)
    ]


def test_the_workflows_running_are_listed_oldest_first_with_their_age_under_what_needs_an_operator() -> None:
    report = replace(status([calm("acme")]), workflows=running(3, overdue=1))
    page = render(report, [], now=NOW)
    text = " ".join(" ".join(read(page).parts).split())
    assert "3 workflows running" in text
    heading = text.index("Workflows running, oldest first (3)")
    assert text.index("Also needing attention") < heading < text.index("Tenants (1)"), "after the problems"
    places = [text.index(w.event_id) for w in report.workflows]
    assert places == sorted(places), "oldest first"
    assert "shipping.ship_order t0 01HZX000000000000000000000 30d 0h" in text
    # The overdue one's age in red, the others' plain
    assert '<td class="bad" title="30d 0h">30d 0h</td>' in page
    assert '<td title="29d 0h">29d 0h</td>' in page
    narrow = render(report, [], now=NOW, box=Box(width=588, height=369))
    said = [dict(attrs)["title"] for tag, attrs in read(narrow).tags if tag == "div" and "line" in str(dict(attrs))]
    assert "shipping.ship_order of 01HZX000000000000000000001 (t1): running for 29d 0h" in said


def test_many_workflows_running_end_with_how_many_more_and_the_page_fits_its_box() -> None:
    box = Box(width=1000, height=300)
    page = render(replace(status([calm("acme")]), workflows=running(40)), [], now=NOW, box=box)
    text = " ".join(" ".join(read(page).parts).split())
    assert re.search(r"and \d+ more: outbox status", text)
    assert "Healthy: nothing needs an operator" in text, "a running workflow is no problem"
    assert lines(page) == box.lines


def test_the_dark_theme_is_a_class_of_the_page() -> None:
    assert 'class="outbox-status dark"' in render(status([]), [], now=NOW, box=Box(dark=True))
    assert "No tenants yet" in "".join(read(render(status([]), [], now=NOW)).parts)
