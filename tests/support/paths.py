"""Where things are: the repository root (the working directory of every subprocess that
imports `tests.support`) and this folder."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]
DATA = SUPPORT / "data"
