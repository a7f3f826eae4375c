"""Models: the bundled draft/target pair, loading real pairs, and the script that trains the bundled one."""

from teachspec.models.pair import BUNDLED, HUB_PAIRS, Pair, load_pair

__all__ = ["BUNDLED", "HUB_PAIRS", "Pair", "load_pair"]
