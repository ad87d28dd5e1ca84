"""Plain-text formatting shared by the harness's messages and tables: plurals, sizes,
durations, rates, one-line messages and fixed-width tables."""

from __future__ import annotations


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def bytes_text(count: float) -> str:
    """1.5 KiB, 21.3 GiB, 5.4 TiB: binary units, three significant digits at most."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if count < 1000 or unit == "PiB":
            break
        count /= 1024
    return f"{count:.0f} {unit}" if unit == "B" else f"{count:.3g} {unit}"


def one_line(text: str) -> str:
    """Text on one line (a protocol value must not hold a newline)."""
    return " | ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _left(seconds: float | None) -> str:
    """", about 40 s left" (nothing when the time left is not known)."""
    return "" if seconds is None else f", {_duration(seconds)} left"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def _rate(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"
