"""Pure response parsers shared by `serve`, `scan` and `abort` (kafka-python's habit: the
request builders live in `collect.client`, the parsers here; neither does I/O).

Each takes a decoded response and returns the exporter's records. Error codes stay codes;
the caller decides what each means for its poll. The APIs in `collect.apis` keep their
parsers in their own module.
"""

from __future__ import annotations

from typing import Any

from exporter.collect.errors import NONE
from exporter.model import FinalizedFeatures

FIRST_API_VERSIONS_WITH_FEATURES = 3
FIRST_API_VERSIONS_LISTING_EVERY_FEATURE = 4
"""KIP-1022: v3 leaves out supported features whose lowest level is 0; v4 lists them all."""


def parse_finalized_features(response: Any, version: int) -> FinalizedFeatures | None:
    """ApiVersions answer at `version` -> its finalized features; None when it carries none.

    They are tagged fields of v3+ (KIP-584, KIP-511); an answer below v3, or with epoch -1
    (the schema's default: the broker does not know them), reports nothing."""
    if version < FIRST_API_VERSIONS_WITH_FEATURES or response.error_code != NONE:
        return None
    epoch = response.finalized_features_epoch
    if epoch is None or epoch < 0:
        return None
    levels: dict[str, int] = {}
    for feature in response.finalized_features or ():
        if not 0 <= feature.min_version_level <= feature.max_version_level:
            return None  # impossible levels: the whole answer is not to be trusted
        levels[feature.name] = feature.max_version_level
    supported: dict[str, int] | None = None
    if version >= FIRST_API_VERSIONS_LISTING_EVERY_FEATURE:
        supported = {f.name: f.max_version for f in response.supported_features or ()}
    return FinalizedFeatures(epoch=epoch, levels=levels, supported=supported)
