"""At 80 columns (a terminal's, and what rich assumes when stdout is not one) no table of the CLI breaks a word in
the middle: a table whose words fit is printed as it is, wrapped between words; one whose words cannot fit is
printed a row at a time, ``column: value``. An event id or a command cut in two cannot be pasted."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from outbox.cli.output import print_table

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=40)
CELL = st.lists(WORD, min_size=1, max_size=4).map(" ".join)


def rendered(*tables: Table, width: int = 80) -> str:
    buffer = io.StringIO()
    print_table(Console(file=buffer, width=width, color_system=None, legacy_windows=False), *tables)
    return buffer.getvalue()


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=8).flatmap(lambda n: st.tuples(
    st.lists(WORD, min_size=n, max_size=n, unique=True),
    st.lists(st.lists(CELL, min_size=n, max_size=n), min_size=1, max_size=4),
)))  # fmt: skip
def test_no_word_of_any_table_is_broken_at_80_columns(shape: tuple[list[str], list[list[str]]]) -> None:
    headers, rows = shape
    table = Table(*headers, title="a title")
    for row in rows:
        table.add_row(*row)

    lines = rendered(table).splitlines()

    for word in {w for cell in (*headers, *(c for row in rows for c in row)) for w in cell.split()}:
        assert any(word in line for line in lines), (word, lines)


def test_a_dead_letter_row_too_wide_for_80_columns_is_printed_whole_field_by_field() -> None:
    table = Table("tenant", "event", "seq", "subscription", "reason", "attempts", "dead at", "error")
    event = "01JF3Q6Z8X9V2T7R5N4M3K2H1G"
    table.add_row("acme", event, "12", "notify.shipment_booked", "terminal", "1", "2026-12-06T23:19:39.123Z", "x")

    said = rendered(table)

    assert f"event: {event}" in said
    assert "subscription: notify.shipment_booked" in said


def test_a_table_whose_words_fit_is_printed_as_a_table() -> None:
    table = Table("tenant", "chain")
    table.add_row("acme", "intact")
    assert "┃ tenant" in rendered(table)


def test_a_table_without_its_header_shown_is_judged_by_what_it_shows() -> None:
    table = Table("field", "value", show_header=False)
    table.add_row("event_id", "01JF3Q6Z8X9V2T7R5N4M3K2H1G")
    said = rendered(table)
    assert "│ event_id │ 01JF3Q6Z8X9V2T7R5N4M3K2H1G │" in said, said
