"""Order- and dtype-insensitive comparison of pandas and Spark result tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd


def records(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    def plain(v: Any) -> Any:
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            return None
        return v.item() if hasattr(v, "item") else v

    rows = [tuple(plain(v) for v in row)
            for row in frame[list(columns)].astype(object).itertuples(index=False)]
    return sorted(rows, key=repr)
