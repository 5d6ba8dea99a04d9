#!/usr/bin/env bash
# Install zoo into ./.venv on a TPU VM (TPU build of torch_xla + libtpu) or a CPU machine
# (CPU torch_xla, plus libtpu so the TPU compiler checks slices compile-only).
# Idempotent: a second run on a ready machine checks the install and changes nothing.
# Optional logins read HF_TOKEN / WANDB_API_KEY from the environment only; they are never
# echoed, written to argv, or accepted as arguments.
set -euo pipefail
cd "$(dirname "$0")"

python=${PYTHON:-python3}
venv=.venv

is_tpu_vm() {
  [ -n "${TPU_ACCELERATOR_TYPE:-}" ] || ls /dev/accel* >/dev/null 2>&1 || [ -e /dev/vfio/0 ]
}

if is_tpu_vm; then target=tpu; else target=cpu; fi
[ -d "$venv" ] || { echo "setup: creating $venv"; "$python" -m venv "$venv"; }

stamp="$venv/.zoo-install"
want="$target $(sha256sum < pyproject.toml | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && "$venv/bin/python" -c "import torch_xla, core, zoo, benchmarks, eval, tools" 2>/dev/null; then
  echo "setup: $venv is up to date ($target)"
else
  echo "setup: installing zoo for $target into $venv (first time: a few minutes, ~9 GB)"
  "$venv/bin/pip" install -q --upgrade pip
  if [ "$target" = tpu ]; then
    # torch_xla[tpu] brings the libtpu its runtime needs (also the compiler for zoo plan)
    "$venv/bin/pip" install -q "torch==2.9.0" "torch_xla[tpu]==2.9.0"
    extras="dev,xla"
  else
    extras="dev,xla,tpu-compile"  # libtpu as a compile-only TPU compiler; XLA runs on the CPU
  fi
  # compat: the venv points at this folder by a static path (a .pth line), not an import
  # hook, so editors and path-based tools follow every import; setuptools warns that the
  # folders here may shadow the installed packages: they are those packages; quiet it
  PYTHONWARNINGS=ignore "$venv/bin/pip" install -q -e ".[$extras]" \
    --config-settings editable_mode=compat
  echo "$want" > "$stamp"
  echo "setup: done"
fi

# Logins: tokens go from the environment straight into the libraries, never onto a command line.
if [ -n "${HF_TOKEN:-}" ]; then
  "$venv/bin/python" - <<'PY' >/dev/null 2>&1 && echo "setup: Hugging Face login ok" || echo "setup: Hugging Face login failed (HF_TOKEN set but rejected or offline)"
import os, huggingface_hub
huggingface_hub.login(token=os.environ["HF_TOKEN"], add_to_git_credential=False)
PY
fi
if [ -n "${WANDB_API_KEY:-}" ]; then
  "$venv/bin/python" - <<'PY' >/dev/null 2>&1 && echo "setup: W&B login ok" || echo "setup: W&B login failed (WANDB_API_KEY set but rejected or offline)"
import os, wandb
wandb.login(key=os.environ["WANDB_API_KEY"], verify=False)
PY
fi
