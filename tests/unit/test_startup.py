"""Commands that only read catalogs, presets or config, and every refusal of bad input,
answer without importing torch_xla, transformers or lm_eval (seconds each at start-up;
benchmarks/startup.py times them). One process runs them in turn, so the first command
that pulls one in is the one named."""

import json
import subprocess
import sys

HEAVY = ("torch_xla", "transformers", "lm_eval", "jax")
COMMANDS = [
    ["--help"],
    ["topology", "v4-32"],
    ["topology", "v9-8"],
    ["models"],
    ["train", "nosuch-tiny"],
    ["train", "llama-tiny", "nosuch=1"],
    ["train", "llama-tiny", "--nproc", "2"],
    ["plan", "llama-8b", "--tpu", "v4-8", "--compare", "maxtext"],
    ["plan", "llama-8b", "--tpu", "v4-8", "seq_len=-1"],
    ["bench", "--suite", "nosuch"],
    ["eval", "{missing}", "--tasks", "arc_easy_sample"],
    ["generate", "{missing}", "--prompt", "hi"],
    ["export", "{missing}", "{scratch}/export"],
    ["new-model", "Bad-Name"],
]
RUN_ALL = """
import json, sys
from tools.cli import cli
heavy, first = {heavy!r}, {{}}
for args in json.loads(sys.argv[1]):
    try:
        cli.main(args, prog_name="zoo", standalone_mode=False)
    except BaseException:  # a refusal (UserError, usage error, SystemExit): what we run here
        pass
    for name in heavy:
        if name in sys.modules and name not in first:
            first[name] = " ".join(args)
print(json.dumps(first))
"""


def test_catalogs_and_refusals_import_no_heavy_library(tmp_path):
    commands = [[a.format(missing=tmp_path / "missing", scratch=tmp_path) for a in args]
                for args in COMMANDS]
    result = subprocess.run([sys.executable, "-c", RUN_ALL.format(heavy=HEAVY),
                             json.dumps(commands)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    first = json.loads(result.stdout.strip().splitlines()[-1])
    assert first == {}, f"imported by (first command): {first}"
