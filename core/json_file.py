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


def read_json_object(path, remedy: str) -> dict:
    """The JSON object in the file at `path`; DamagedFile naming it when it cannot be read
    (a folder in its place, a link loop, not text) or holds no JSON object. A missing file
    raises FileNotFoundError: whether that is damage is the caller's to say."""
    try:
        with open(path, "rb") as file:
            text = file.read().decode()
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as error:
        raise DamagedFile(f"{path} is damaged (not UTF-8 text at byte {error.start}); "
                          f"{remedy}") from None
    except OSError as error:
        raise DamagedFile(f"{path} cannot be read ({error.strerror}); {remedy}") from None
    return json_object(text, str(path), remedy)
