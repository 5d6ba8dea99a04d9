"""Which training steps to profile (`profile.start_step`, `profile.steps`): the backend
captures them (core/backends/xla/profile.py: an XLA profile for TensorBoard)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ProfileConfig:
    start_step: int = 0  # the first step captured (counting from 1); 0: no profile
    steps: int = 3  # steps in the window
    dir: str = ""  # empty: RUN/profile

    def __post_init__(self):
        if self.start_step < 0 or self.steps < 1:
            raise ValueError(f"profile.start_step must be >= 0 and profile.steps >= 1, got "
                             f"{self.start_step} and {self.steps}")
