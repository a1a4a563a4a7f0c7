"""Name rules: validate variable and scope names, join them, and make names unique as a TF1 graph does.

The one definition of a valid name: `scopes.py` applies it to new variables
and scopes, `checkpoint/format/manifest.py` to the names a checkpoint stores.
Knows nothing about variables, stores or files.
"""

from __future__ import annotations

from varstore.errors import InvalidNameError

__all__ = ["validate_name", "join", "UniqueNamer"]


def validate_name(name: object, what: str = "variable name", *, allow_control: bool = False) -> str:
    """Returns `name` when it is a valid name or path of names ("conv1/weights").

    Any Unicode is fine except control characters (NUL, newline, ... : category Cc).

    Raises:
      InvalidNameError: not a string, empty, a leading or trailing "/", an
        empty part ("a//b"), a "." or ".." part, a control character (NUL included)
        or a lone surrogate (not UTF-8). With `allow_control` (a foreign format's
        member name, which may hold an escape character) only NUL among the
        control characters is refused.
    """
    if not isinstance(name, str):
        raise InvalidNameError(f"a {what} must be a string, got {name!r}")
    if not name:
        raise InvalidNameError(f"a {what} must not be empty")
    if name.startswith("/") or name.endswith("/"):
        raise InvalidNameError(f"{what} {name!r} must not start or end with '/'")
    if not name.isprintable():  # fast path: printable names hold no control character
        import unicodedata  # only for a name that is not printable

        for ch in name:
            if unicodedata.category(ch) == "Cc" and (ch == "\0" or not allow_control):
                raise InvalidNameError(f"{what} {name!r} contains the control character {ch!r}")
            if unicodedata.category(ch) == "Cs":  # a lone surrogate (a non-UTF-8 byte os.fsdecode kept)
                raise InvalidNameError(f"{what} {name!r} contains the lone surrogate {ch!r}, which is not "
                                       f"UTF-8: no file format can store it")
    for part in name.split("/"):
        if part == "":
            raise InvalidNameError(f"{what} {name!r} has an empty part ('//')")
        if part in (".", ".."):
            raise InvalidNameError(f"{what} {name!r} has a {part!r} part; names are not paths")
    return name


def join(scope: str, name: str) -> str:
    """"scope/name", or `name` in the root scope ("")."""
    return f"{scope}/{name}" if scope else name


class UniqueNamer:
    """Unique names as tf.Graph.unique_name: "Mark", "Mark_1", "Mark_2"; a claimed name stays claimed.

    Not thread-safe; the store calls it under its lock.
    """

    def __init__(self) -> None:
        self._in_use: dict[str, int] = {}

    def unique(self, name: str) -> str:
        """Claims and returns `name`, or `name_N` with the smallest free N >= the times `name` was asked for."""
        count = self._in_use.get(name, 0)
        self._in_use[name] = count + 1
        if count == 0:
            return name
        candidate = f"{name}_{count}"
        while candidate in self._in_use:
            count += 1
            candidate = f"{name}_{count}"
        self._in_use[candidate] = 1
        return candidate

    def claim(self, name: str) -> None:
        """Marks `name` as used without renaming it (get_variable names)."""
        self._in_use[name] = max(self._in_use.get(name, 0), 1)

    def __contains__(self, name: str) -> bool:
        return name in self._in_use
