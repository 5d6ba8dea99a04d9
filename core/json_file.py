"""The one reader of the small JSON files zoo keeps (locks, leases, owners, manifests,
configs): a file that is not JSON, or JSON of another shape than an object, is one line
naming the file and what to do, never an AttributeError deep in the caller."""

import json

from core.errors import UserError


class DamagedFile(UserError):
    """A file zoo reads is not the JSON object it should hold."""


def json_object(text: str, source: str, remedy: str) -> dict:
    """`text` (the contents of `source`) as a dict; DamagedFile naming `source`, why, and
    `remedy` (what the user should do) otherwise."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise DamagedFile(f"{source} is damaged (not JSON: {_why(error)}); {remedy}") from None
    if not isinstance(value, dict):
        raise DamagedFile(f"{source} is damaged (a JSON {type(value).__name__}, not an "
                          f"object); {remedy}")
    return value


def _why(error: ValueError) -> str:
    return (f"{error.msg} at line {error.lineno}" if isinstance(error, json.JSONDecodeError)
            else str(error))
