"""What the subcommands share: ``--param KEY=VALUE`` items (:func:`parse_params`), the data
directory (:func:`data_dir_of`), a stored campaign's id checked (:func:`existing_campaign`) and tables
printed as text (:func:`print_table`)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError

__all__ = ["data_dir_of", "existing_campaign", "parse_params", "print_table"]


def parse_params(items: list[str]) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--param {item!r}: write KEY=VALUE (VALUE may be JSON, e.g. board=12)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
        except RecursionError:
            raise ConfigError(f"option {key!r}: value nested too deeply") from None
    return out


def data_dir_of(args) -> Path:
    from ..core.paths import data_dir

    if args.data_dir is not None:
        return Path(args.data_dir)
    try:
        return data_dir()
    except ConfigError:
        return Path("data")


def existing_campaign(args, campaign: str) -> str:
    """``campaign`` if it is a valid campaign id (no ``..``, no ``/``: :func:`~labkit.core.ids.check_campaign_id`)
    and ``data_dir/campaign/store.sqlite`` exists, else a ConfigError with the closest stored ids
    (:func:`labkit.report.catalog.require_campaign`)."""
    from ..core.ids import check_campaign_id
    from ..report.catalog import require_campaign

    return require_campaign(data_dir_of(args), check_campaign_id(campaign))


def print_table(df) -> None:
    """``df`` as text, numbers to 4 significant digits (:func:`labkit.report.tables.readable`)."""
    import pandas as pd

    from ..report.tables import readable

    with pd.option_context("display.width", 200, "display.max_columns", 40, "display.max_rows", 500):
        print(readable(df).to_string(index=False))
