"""RadixAttention's prefix cache: a radix tree over token ids whose nodes hold KV payloads (see tree.py)."""

from teachspec.radix.tree import (EVICTION, InvariantError, MatchResult, MemoryUse, Node, RadixCache,
                                  RadixMetrics)

__all__ = ["EVICTION", "InvariantError", "MatchResult", "MemoryUse", "Node", "RadixCache", "RadixMetrics"]
