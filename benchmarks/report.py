"""The suite's two outputs: a plain-text table for people, a JSON array for machines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from benchmarks.figures import Figure

COLUMNS = ("scenario", "median", "unit", "baseline", "ratio", "target", "meets", "min/max")


def number(value: float | None) -> str:
    """Format a figure's number compactly: 4 significant digits, '-' for none."""
    if value is None:
        return "-"
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def _meets(figure: Figure) -> str:
    meets = figure.meets
    if meets is None:
        return "-"
    return "yes" if meets else "no"


def _row(figure: Figure) -> tuple[str, ...]:
    spread = "-"
    if figure.samples:
        spread = f"{number(min(figure.samples))}/{number(max(figure.samples))}"
    return (
        figure.name,
        number(figure.value),
        figure.unit,
        number(figure.baseline),
        number(figure.ratio),
        figure.target.describe(figure.unit) if figure.target else "-",
        _meets(figure),
        spread,
    )


def render_table(figures: Sequence[Figure]) -> str:
    """Return the table, one row per figure, with each figure's note listed below it."""
    rows = [COLUMNS, *(_row(figure) for figure in figures)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    numeric = {1, 3, 4}  # right-aligned columns

    def line(row: tuple[str, ...]) -> str:
        cells = [
            cell.rjust(width) if i in numeric else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    out = [line(rows[0]), "  ".join("-" * width for width in widths)]
    out += [line(row) for row in rows[1:]]
    notes = [f"- {figure.name}: {figure.note}" for figure in figures if figure.note]
    if notes:
        out += ["", "Notes:", *notes]
    return "\n".join(out)


def to_json(figures: Sequence[Figure]) -> str:
    return json.dumps([figure.to_json() for figure in figures], indent=2, default=str)


def write_json(path: Path, figures: Sequence[Figure]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(figures) + "\n")
