"""Parameter schemas: every workload parameter's type and allowed values.

A workload declares ``schema = {"board": Int(4, 18), ...}`` beside its
``defaults``. :meth:`Param.check` turns a value (from Python, a YAML level or
``--param``) into its canonical form (``8.0`` -> ``8`` for an integer) or raises
:class:`~labkit.errors.ConfigError` naming the workload, the key and what is
allowed. :meth:`Param.from_text` reads a ``--param KEY=VALUE`` string: a string
parameter keeps the text as it is (``argv=true`` is the string ``"true"``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError, did_you_mean

MAX_TEXT = 4096


class Param:
    """Base schema entry; ``none=True`` also allows None (usually: "derive it")."""

    kind = "value"

    def __init__(self, *, none: bool = False):
        self.none = none

    def check(self, where: str, value: object) -> Any:
        """The canonical value, or ConfigError ``"<where>: ..."``."""
        if value is None:
            if self.none:
                return None
            raise ConfigError(f"{where}: a value is required ({self.describe()})")
        return self._check(where, value)

    def _check(self, where, value):
        return value

    def from_text(self, where: str, text: str) -> Any:
        """The value of a ``--param`` text (``null``/``none`` is None when allowed)."""
        if self.none and text.strip().lower() in ("null", "none", "~"):
            return None
        return self.check(where, self._parse(where, text))

    def _parse(self, where, text):
        return text

    def describe(self) -> str:
        return self.kind + (" or null" if self.none else "")

    def _bad(self, where, value):
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return ConfigError(f"{where}: {shown} is not allowed; expected {self.describe()}")


class Int(Param):
    """An integer in [lo, hi]; an integral float (8.0) or digit string counts as that integer."""

    def __init__(self, lo: int, hi: int, **kw: bool):
        super().__init__(**kw)
        self.lo, self.hi = lo, hi
        self.kind = f"an integer from {lo} to {hi}"

    def _check(self, where, value):
        v = value
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        elif isinstance(v, str) and re.fullmatch(r"\s*[+-]?[0-9]{1,19}\s*", v):
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not self.lo <= v <= self.hi:
            raise self._bad(where, value)
        return v


class Num(Param):
    """A finite number in (lo, hi] (``lo`` excluded: a duration or size must be > lo)."""

    def __init__(self, lo: float, hi: float, **kw: bool):
        super().__init__(**kw)
        self.lo, self.hi = lo, hi
        self.kind = f"a number > {lo:g} and <= {hi:g}"

    def _check(self, where, value):
        v = value
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise self._bad(where, value) from None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self._bad(where, value)
        if isinstance(v, int) and abs(v) > 2**53:
            raise self._bad(where, value)
        if not math.isfinite(v) or not self.lo < v <= self.hi:
            raise self._bad(where, value)
        return int(v) if isinstance(v, float) and v.is_integer() else v


class Bool(Param):
    kind = "true or false"
    _TEXT = {
        "true": True,
        "yes": True,
        "on": True,
        "1": True,
        "false": False,
        "no": False,
        "off": False,
        "0": False,
    }

    def _check(self, where, value):
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in self._TEXT:
            return self._TEXT[value.strip().lower()]
        raise self._bad(where, value)


class Str(Param):
    """A string: one of ``choices``, or matching ``pattern`` (full match), at most MAX_TEXT long."""

    def __init__(self, choices: Iterable[str] | None = None, pattern: str | None = None, **kw: bool):
        super().__init__(**kw)
        self.choices = tuple(choices) if choices is not None else None
        self.pattern = re.compile(pattern) if pattern else None
        if self.choices:
            self.kind = "one of " + ", ".join(self.choices)
        elif self.pattern:
            self.kind = f"a string matching {pattern}"
        else:
            self.kind = "a string"

    def _check(self, where, value):
        if not isinstance(value, str) or len(value) > MAX_TEXT or "\x00" in value:
            raise self._bad(where, value)
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{self._bad(where, value)}{did_you_mean(value, self.choices, n=1)}")
        if self.pattern is not None and not self.pattern.fullmatch(value):
            raise self._bad(where, value)
        return value


class StrList(Param):
    """A list of strings (each one of ``choices`` if given), or one string when ``text_ok``.

    ``from_text`` reads a JSON list (``["sleep", "1"]``) or keeps the text as one string.
    """

    def __init__(
        self, choices: Iterable[str] | None = None, *, text_ok: bool = True, max_items: int = 256, **kw: bool
    ):
        super().__init__(**kw)
        self.item = Str(choices)
        self.text_ok = text_ok
        self.max_items = max_items
        self.kind = f"a list of {self.item.kind}s" if choices is None else f"a list of ({self.item.kind})"
        if text_ok:
            self.kind += " or a string"

    def _check(self, where, value):
        if isinstance(value, str) and self.text_ok:
            if self.item.choices is None:
                return self.item.check(where, value)
            items = [v.strip() for v in value.split(",") if v.strip()]
            if not items:
                raise self._bad(where, value)
            for v in items:
                self.item.check(where, v)
            return value  # validated; a comma list stays the string it was
        if not isinstance(value, (list, tuple)) or not value or len(value) > self.max_items:
            raise self._bad(where, value)
        return [self.item.check(f"{where}[{i}]", v) for i, v in enumerate(value)]

    def _parse(self, where, text):
        if text.lstrip().startswith("["):
            try:
                return json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise ConfigError(f"{where}: not a JSON list: {type(exc).__name__}") from None
        return text


# shared entries
SIZE = Str(pattern=r"[0-9]{1,12}(\.[0-9]{1,6})?[KMGTkmgt]?")
THREADS = Int(1, 4096, none=True)
TIMEOUT = Num(0, 7 * 86400, none=True)
NAME = Str(pattern=r"[A-Za-z0-9_.+-]{1,128}")
PATH = Str(pattern=r"[^\x00\n]{1,4096}", none=True)
