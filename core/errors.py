"""User-facing errors: the CLI prints their message as one line and exits non-zero."""


class UserError(Exception):
    """Bad input from the user (a config key, a slice name, a sharding rule, ...)."""
