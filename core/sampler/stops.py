"""Stop strings, matched on the host as tokens arrive (a string may span several tokens, so
the device cannot see it). Each row's text is searched only past what was already searched,
less an overlap one character shorter than the longest stop string."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str], decode: Callable[[list[int]], str]):
        self.stops, self.decode = tuple(stops), decode
        self.overlap = max(map(len, self.stops)) - 1
        self.searched: dict[int, int] = {}  # row -> characters of its text already searched

    def match(self, row: int, tokens: list[int]) -> int | None:
        """The number of `tokens` (a row's new tokens so far) up to and including the one
        that completes a stop string, or None while no stop string has appeared."""
        text = self.decode(tokens)
        start = max(0, self.searched.get(row, 0) - self.overlap)
        self.searched[row] = len(text)
        if not any(stop in text[start:] for stop in self.stops):
            return None
        return next(count for count in range(1, len(tokens) + 1)
                    if any(stop in self.decode(tokens[:count]) for stop in self.stops))
