"""Option types shared by the `zoo` commands."""

import math

import click


class FiniteRange(click.FloatRange):
    """click's FloatRange, which lets nan (and inf, without a maximum) through: refused too."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number.", param, ctx)
        return number
