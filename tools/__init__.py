"""The top floor: the `zoo` command line (tools/cli.py) and the TPU VM launcher under it."""
