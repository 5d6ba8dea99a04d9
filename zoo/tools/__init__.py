"""The top floor: the `zoo` command line (zoo/tools/cli.py) and the TPU VM launcher under it."""
