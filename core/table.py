"""Plain aligned text tables for the console (plans, benchmark results)."""


def format_table(header: tuple[str, ...], rows: list[tuple]) -> str:
    cells = [tuple(header)] + [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)
