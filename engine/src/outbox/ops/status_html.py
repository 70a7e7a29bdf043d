"""The outbox on one HTML page sized to a box: what ``outbox status`` and ``outbox dead-letters groups`` know
(``outbox.ops.status_view`` says what), for the CloudWatch dashboard's status widget
(``outbox.handlers.status_widget``) and ``outbox status --html FILE``.

It fits its box, however much is wrong: every row is one line of ``LINE_PX`` (a text too long for its place
ends in an ellipsis, and its title holds the whole text), so the page's height is counted in lines before it is
written; the lists share the lines left under the facts at the top, what needs an operator first (then the workflows
running and the tenants that need nothing, in what is left), and a list longer than its share ends with "and N
more: <command>". A box narrower than ``NARROW_PX`` gets lines instead of
tables: each row in a line, its command in the next. Everything that comes from data is escaped. No script:
CloudWatch strips JavaScript from a custom widget, and the page needs none.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from outbox.ops.groups import FailureGroup
from outbox.ops.status import Status
from outbox.ops.status_view import Cell, Fact, Facts, Row, Section, facts, running, sections
from outbox.ops.wording import plural

LINE_PX: Final = 18
PAD_PX: Final = 6
# Narrower than this, a table's columns are too narrow to read: each row is said in a line instead.
NARROW_PX: Final = 800
# The page ``outbox status --html`` writes: about the dashboard's widget (full width, 8 rows) on a laptop.
DEFAULT_WIDTH: Final = 1200
DEFAULT_HEIGHT: Final = 400


@dataclass(frozen=True)
class Box:
    """Where the page must fit, in CSS pixels, and the dashboard's theme."""

    width: int = DEFAULT_WIDTH
    height: int = DEFAULT_HEIGHT
    dark: bool = False

    @property
    def lines(self) -> int:
        return max(1, (self.height - 2 * PAD_PX) // LINE_PX)

    @property
    def narrow(self) -> bool:
        return self.width < NARROW_PX


def render(status: Status, groups: Sequence[FailureGroup], *, now: datetime, box: Box | None = None) -> str:
    """The page as an HTML fragment (what a custom widget returns); ``document`` makes it a file."""
    box = box or Box()
    problems = status.needs_attention()
    header = [_line(fact) for fact in _header(facts(status, problems, now), box)][: box.lines]
    found, calm = sections(status, problems, groups)
    steps = [_step(section, box) for section in found]
    left = box.lines - len(header)
    shares = _shares([1 + len(s.rows) * step for s, step in zip(found, steps, strict=True)], steps, left)
    left -= sum(shares)
    for quiet in (running(status), calm):  # what needs nothing, in what is left: the workflows, then the tenants
        if quiet.rows and left >= 2:
            found.append(quiet)
            shares.append(min(1 + len(quiet.rows), left))
            left -= shares[-1]
    blocks = [_block(section, share, box) for section, share in zip(found, shares, strict=True) if share]
    theme = " dark" if box.dark else ""
    return (
        f'<div class="cwdb-no-default-styles"></div><style>{_css(box)}</style>'
        f'<div class="outbox-status{theme}">{"".join(header)}{"".join(blocks)}</div>'
    )


def document(fragment: str, title: str = "Outbox status") -> str:
    """A page of its own around ``render``'s fragment, as a browser opens a file."""
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>body{{margin:0}}</style></head><body>{fragment}</body></html>"
    )


def _header(said: Facts, box: Box) -> list[Fact]:
    if box.narrow:
        return [
            said.verdict,
            _joined(said.tenants, said.dead_work),
            said.anchoring,
            _joined(said.dead_letter_queues, said.pipes),
            said.queues,
        ]
    return [
        said.verdict,
        _joined(said.tenants, said.anchoring, said.dead_work),
        _joined(said.queues, said.dead_letter_queues, said.pipes),
    ]


def _joined(*parts: Fact) -> Fact:
    joined: list[Cell] = []
    for index, part in enumerate(parts):
        joined += [*([Cell(" · ")] if index else []), *part]
    return tuple(joined)


def _step(section: Section, box: Box) -> int:
    """The lines a row of ``section`` takes: two in a narrow box (the row, then its command), else one."""
    return 2 if box.narrow and section.repairs else 1


def _shares(needs: list[int], steps: list[int], lines: int) -> list[int]:
    """The lines each list gets (its heading included): in order, its heading and a row while two lines are left,
    then a row more at a time round the lists, until each has what it needs or no line is left."""
    shares = [0] * len(needs)
    for index, need in enumerate(needs):
        if lines >= 2:
            shares[index] = min(need, 1 + steps[index], lines)
            lines -= shares[index]
    while lines > 0:
        growing = [index for index, share in enumerate(shares) if 0 < share < needs[index]]
        if not growing:
            break
        for index in growing:
            more = min(steps[index], needs[index] - shares[index], lines)
            shares[index] += more
            lines -= more
    return shares


def _block(section: Section, share: int, box: Box) -> str:
    """``section`` in ``share`` lines: its heading, and its rows, or as many as fit before an "and N more"."""
    step = _step(section, box)
    room = share - 1
    shown = section.rows if len(section.rows) * step <= room else section.rows[: (room - 1) // step]
    rest = len(section.rows) - len(shown)
    more = ""
    if rest:
        count = f"and {rest} more:" if shown else f"{plural(rest, section.noun)}:"
        more = f"{_span(count, 'muted')} {_code(section.rest)}"
    if box.narrow:
        lines = [_line((Cell(section.title),), "head")]
        for row in shown:
            lines.append(_line(row.brief))
            if section.repairs:
                lines.append(f'<div class="line cmd" title="{_e(row.repair)}">{_code(row.repair)}</div>')
        return "".join(lines) + (f'<div class="line">{more}</div>' if more else "")
    columns = ((section.title, section.width), *section.columns)
    widths = "".join(f'<col style="width:{width}%">' for _, width in columns)
    heading = "".join(f'<th title="{_e(label)}">{_e(label)}</th>' for label, _ in columns)
    rows = ["<tr>" + "".join(_cells(row, section.repairs)) + "</tr>" for row in shown]
    if more:
        rows.append(f'<tr><td colspan="{len(columns)}">{more}</td></tr>')
    body = "".join(rows)
    return f"<table><colgroup>{widths}</colgroup><thead><tr>{heading}</tr></thead><tbody>{body}</tbody></table>"


def _cells(row: Row, repairs: bool) -> list[str]:
    cells = [_cell(cell) for cell in row.cells]
    if repairs:
        cells.append(f'<td title="{_e(row.repair)}">{_code(row.repair)}</td>')
    return cells


def _cell(cell: Cell) -> str:
    style = f' class="{cell.style}"' if cell.style else ""
    return f'<td{style} title="{_e(cell.text)}">{_e(cell.text)}</td>'


# -- markup -----------------------------------------------------------------------------------------------


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _span(text: str, style: str) -> str:
    return f'<span class="{style}">{_e(text)}</span>' if style else _e(text)


def _code(text: str) -> str:
    return f"<code>{_e(text)}</code>"


def _line(fact: Fact, style: str = "") -> str:
    text = "".join(cell.text for cell in fact)
    classes = f"line {style}".strip()
    return f'<div class="{classes}" title="{_e(text)}">{"".join(_span(c.text, c.style) for c in fact)}</div>'


def _css(box: Box) -> str:
    line = f"height:{LINE_PX}px;line-height:{LINE_PX}px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis"
    root = ".outbox-status"
    return (
        f"{root}{{box-sizing:border-box;width:100%;max-width:{box.width}px;padding:{PAD_PX}px 8px;margin:0;"
        f"font:12px/{LINE_PX}px 'Amazon Ember','Helvetica Neue',Roboto,Arial,sans-serif;color:#16191f}}"
        f"{root} .line{{{line}}}{root} .cmd{{padding-left:14px}}"
        f"{root} table{{width:100%;table-layout:fixed;border-collapse:collapse;border-spacing:0;margin:0}}"
        f"{root} th,{root} td{{{line};padding:0 8px 0 0;border:0;text-align:left;vertical-align:top}}"
        f"{root} th,{root} .head{{font-weight:600;color:#414d5c;background:#f2f3f3}}"
        f"{root} code{{font:12px/{LINE_PX}px Menlo,Consolas,'DejaVu Sans Mono',monospace;vertical-align:top}}"
        f"{root} .bad{{color:#d91515;font-weight:600}}{root} .good{{color:#037f0c;font-weight:600}}"
        f"{root} .muted{{color:#5f6b7a}}"
        f"{root}.dark{{color:#d1d5db;background:#0f1b2a}}{root}.dark th,{root}.dark .head{{color:#d1d5db;"
        f"background:#232f3e}}{root}.dark .bad{{color:#ff5d64}}{root}.dark .good{{color:#29ad32}}"
        f"{root}.dark .muted{{color:#9ba7b6}}"
    )
