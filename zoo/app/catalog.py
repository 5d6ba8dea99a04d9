"""`zoo models`: every registered model and size with its parameter count, counted on the
meta device (nothing is allocated)."""

from __future__ import annotations

from zoo.registry import FAMILIES, family, parameter_count


def model_lines() -> list[str]:
    """One line per model; a mixture of experts also gives its parameters active per token."""
    lines = []
    for fam_name in FAMILIES:
        fam = family(fam_name)
        for size in fam.sizes:
            count = parameter_count(fam, size)
            line = f"{fam_name}-{size:10} {count / 1e6:>10,.1f} M parameters"
            if fam.active_parameters:
                active = fam.active_parameters(fam.sizes[size], count)
                line += f", {active / 1e6:,.1f} M active per token"
            lines.append(line)
    return lines
