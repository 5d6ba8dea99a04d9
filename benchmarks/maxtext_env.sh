#!/usr/bin/env bash
# Build (once) the virtualenv `zoo bench --compare maxtext` runs MaxText in, and print its
# python. MaxText needs Python >= 3.12 and its own JAX, so it cannot share zoo's .venv.
# Idempotent: a ready environment (its stamp matches the pin) is reused untouched.
#   ZOO_MAXTEXT_VENV  where the environment lives (default: .venv-maxtext in the repo; relative to it)
#   ZOO_MAXTEXT_PYTHON  a Python >= 3.12 to build it from (default: the first one found)
set -euo pipefail
cd "$(dirname "$0")/.."  # the repository root

pin="maxtext[tpu]==0.2.5"  # the version measured beside zoo (benchmarks/results/maxtext-cpu-2core.md; JAX 0.12)
venv=$(realpath -m "${ZOO_MAXTEXT_VENV:-.venv-maxtext}")
stamp="$venv/.zoo-maxtext"

ready() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pin" ] && [ -x "$venv/bin/python" ]; }
if ready; then
  echo "$venv/bin/python"
  exit 0
fi
# one builder at a time: a second caller (a test, another zoo plan) waits for the first's
# build instead of deleting the environment under it, then reuses it
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ready; then
  echo "$venv/bin/python"
  exit 0
fi

supported() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }

python=${ZOO_MAXTEXT_PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.13 python3.12 python3 \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 && supported "$candidate"; then
      python=$candidate
      break
    fi
  done
fi
if [ -z "$python" ] || ! supported "$python"; then
  echo "maxtext_env: MaxText needs Python >= 3.12 and none was found; install one" \
       "(e.g. pyenv install 3.12) or set ZOO_MAXTEXT_PYTHON" >&2
  exit 1
fi

echo "maxtext_env: building $venv from $python with $pin (first use: a few minutes)" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip >&2
"$venv/bin/pip" install -q "$pin" >&2
echo "$pin" > "$stamp"
echo "$venv/bin/python"
