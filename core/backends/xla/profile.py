"""An XLA profile of a window of training steps (`profile.start_step`, `profile.steps`),
written where TensorBoard's profile plugin reads it (`pip install .[profile]`, then
`tensorboard --logdir RUN/profile`). Inside the window the loop's phases are named regions:
`data` (the next batch), `step` (trace and dispatch of the train step) and `checkpoint`.
Outside it nothing is traced, so the regions cost nothing."""

from __future__ import annotations

import contextlib
from pathlib import Path

from core.profile import ProfileConfig


def start_trace(folder: str) -> None:
    import torch_xla.debug.profiler as xp  # torch_xla

    xp.start_trace(folder)


def stop_trace() -> None:
    """Once the devices have finished what was dispatched."""
    import torch_xla.core.xla_model as xm  # torch_xla
    import torch_xla.debug.profiler as xp  # torch_xla

    xm.wait_device_ops()
    xp.stop_trace()


class StepProfiler:
    def __init__(self, config: ProfileConfig, run_dir: Path):
        self.config = config
        self.dir = config.dir or str(run_dir / "profile")
        self.active = False

    def step_starts(self, step: int) -> None:
        """Called before step `step` (counting from 1) begins, on every host."""
        if self.config.start_step and step == self.config.start_step:
            start_trace(self.dir)
            self.active = True

    def step_ended(self, step: int, last: bool) -> str | None:
        """Called after step `step`; ends the window (waiting for the device) at its last step
        or the run's, and returns a line saying where the profile is."""
        window_open = step < self.config.start_step + self.config.steps - 1
        if not self.active or (window_open and not last):
            return None
        stop_trace()
        self.active = False
        return (f"profile of steps {self.config.start_step}-{step} in {self.dir} "
                f"(tensorboard --logdir {self.dir})")

    def region(self, name: str):
        if not self.active:
            return contextlib.nullcontext()
        import torch_xla  # torch_xla

        # A host trace event only: xp.Trace also opens an IR scope, in which a sync (the
        # loader's, the step's, a save's) is an error.
        return torch_xla._XLAC.profiler.TraceMe(name)
