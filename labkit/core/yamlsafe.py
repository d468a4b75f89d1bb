"""A bounded YAML reader for designs and other user files.

``load_yaml(path)`` reads at most :data:`MAX_BYTES`, refuses a file that is not
UTF-8, and refuses documents whose aliases would expand past a small budget
(anchor bombs: a 500-byte file can otherwise expand to billions of nodes), that
nest deeper than :data:`MAX_DEPTH`, or that hold more than one document. Every
refusal is a :class:`~labkit.errors.ConfigError` naming the file (and line).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import ConfigError

MAX_BYTES = 1 << 20  # 1 MiB: a design is a few hundred bytes
MAX_ALIASES = 100  # *references* in one document
MAX_NODES = 100_000  # nodes after alias expansion
MAX_DEPTH = 64  # nesting of sequences/mappings


class _Budget(Exception):
    pass


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts alias uses, nesting depth and expanded size while composing."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0
        self._size: dict[int, int] = {}  # id(node) -> expanded node count
        self._total = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Budget(f"more than {MAX_ALIASES} aliases (*name)")
            node = super().compose_node(parent, index)
            self._add(self._size.get(id(node), 1))
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Budget(f"nested deeper than {MAX_DEPTH} levels")
        before = self._total
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._add(1)
        self._size[id(node)] = self._total - before
        return node

    def _add(self, n: int) -> None:
        self._total += n
        if self._total > MAX_NODES:
            raise _Budget(f"expands to more than {MAX_NODES:,} nodes (alias/anchor expansion)")


def loads(text: str, source: str = "<yaml>"):
    """Parse one YAML document from ``text`` within the budgets; ConfigError naming ``source``."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_BYTES:,} bytes; not a labkit file")
    loader = None
    try:
        loader = _BoundedLoader(text)  # the reader refuses control characters here already
        data = loader.get_single_data()
    except _Budget as exc:
        raise ConfigError(f"{source}: refused: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: refused: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp out of range
        raise ConfigError(f"{source}: a value could not be read: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data


def load_yaml(path: str | Path):
    """The YAML document in ``path`` (see the module docstring for the limits)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}: {raw[exc.start : exc.start + 1]!r}); "
            "save the file as UTF-8"
        ) from None
    return loads(text, str(path))
