"""Plain aligned text tables for the console (plans, benchmark results)."""


def format_table(header: tuple[str, ...], rows: list[tuple]) -> str:
    cells = [tuple(header)] + [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def format_bytes(count: float) -> str:
    """1.23 GiB, 45.6 MiB or 789 KiB: three significant figures at a readable unit."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20)):
        if abs(count) >= size:
            return f"{count / size:,.2f} {unit}"
    return f"{count / 2**10:,.0f} KiB"
