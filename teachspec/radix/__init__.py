"""RadixAttention's prefix cache: a radix tree over token ids whose nodes hold KV payloads (see tree.py)."""

from teachspec.radix.tree import (POLICIES, InvariantError, MatchResult, MemoryUse, Node, RadixCache,
                                  RadixMetrics)

__all__ = ["POLICIES", "InvariantError", "MatchResult", "MemoryUse", "Node", "RadixCache", "RadixMetrics"]
