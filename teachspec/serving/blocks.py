"""vLLM's prefix cache as teachspec's radix events: a chain of full blocks is a path of pages.

SGLang's radix tree (teachspec/radix/tree.py) shares at token granularity: a node holds any run of tokens, and a
new request that diverges in the middle of a node splits it. vLLM's prefix cache (Kwon et al. 2023, "automatic
prefix caching") shares at block granularity: the KV cache is cut into blocks of `block_size` tokens, only FULL
blocks are cached, and a block is named by a hash of its tokens and its parent block's hash,

    hash(block i) = H(hash(block i - 1), tokens of block i)

so a block's hash names its whole prefix, and a lookup walks a prompt's full blocks from the first until a hash
is missing. Nothing is ever split: two prompts that differ at token 40 of 32-token blocks share block 0 and part
ways at block 1, and the 8 equal tokens of block 1 are computed again. The last partial block of every sequence
is never cached at all.

vLLM publishes what its cache does (vllm/distributed/kv_events.py), and `BlockTree` replays it as the events a
RadixTreeView already draws:

    BlockStored(block_hashes, parent_block_hash, token_ids, block_size)   one Insert per new block, under its
                                                                          parent's node (the root if none)
    BlockRemoved(block_hashes)                                            an Evict per block
    AllBlocksCleared()                                                    an Evict for every block, leaves first

so every node of the drawn tree is one block of `block_size` tokens, labelled with its text, and a cached
sequence is a chain of equal-sized nodes: the pages are visible, not merged away. Each block gets a node id of its
own (1, 2, ...; the root is 0) the first time it is stored.

vLLM can drop a block whose descendants it still holds (its free queue is least recently used first, and it
frees a request's blocks tail first, so this is rare). A lookup walks the hash chain from the first block, so
those descendants can no longer be reached: the tree drops them with their parent (leaves first, as a
RadixTreeView evicts), and ignores their own BlockRemoved when it comes. A block stored under a parent the tree
never saw (the watcher started after the server stored it) hangs from the root, and `orphans` counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teachspec.events import Evict, EventLog, Insert


@dataclass(slots=True)
class Block:
    node: int
    parent: int                     # node id; 0 is the root
    tokens: list[int]
    hash: object                    # vLLM's name for it
    children: list[int] = field(default_factory=list)


class BlockTree:
    """The blocks a vLLM server holds, kept from its KV events; each change is emitted into `log`."""

    def __init__(self, log: EventLog | None = None):
        self.log = log if log is not None else EventLog()
        self.blocks: dict[int, Block] = {}          # node id -> block
        self.by_hash: dict[object, int] = {}        # vLLM's block hash -> node id
        self.roots: list[int] = []                  # node ids of first blocks, in the order stored
        self.orphans = 0                            # blocks whose parent the tree never saw
        self.next_id = 1

    # -- what vLLM said ------------------------------------------------------------------------------------------

    def stored(self, block_hashes: list, parent_hash, token_ids: list[int], block_size: int) -> None:
        """A run of new full blocks, each the child of the one before; the first hangs from `parent_hash`."""
        if len(token_ids) != len(block_hashes) * block_size:
            raise ValueError(f"BlockStored carries {len(token_ids)} token ids for {len(block_hashes)} blocks of "
                             f"{block_size}: a stored block is always full")
        parent = 0
        if parent_hash is not None:
            parent = self.by_hash.get(_key(parent_hash), 0)
            self.orphans += parent == 0
        for i, h in enumerate(block_hashes):
            h = _key(h)
            if h in self.by_hash:  # stored again (another request computed it too): nothing new
                parent = self.by_hash[h]
                continue
            tokens = list(token_ids[i * block_size:(i + 1) * block_size])
            node, self.next_id = self.next_id, self.next_id + 1
            self.blocks[node] = Block(node, parent, tokens, h)
            (self.blocks[parent].children if parent else self.roots).append(node)
            self.by_hash[h] = node
            self.log.emit(Insert, node=node, parent=parent, tokens=len(tokens),
                          cached=self.depth(parent) * block_size, ids=tokens)
            parent = node

    def removed(self, block_hashes: list) -> None:
        for h in block_hashes:
            node = self.by_hash.get(_key(h))
            if node is not None:  # else: dropped already, with a parent that went before it
                self._drop(node)

    def cleared(self) -> None:
        for node in list(self.roots):
            self._drop(node)

    # -- reading it ----------------------------------------------------------------------------------------------

    def depth(self, node: int) -> int:
        """Blocks on the path root -> node (0 for the root)."""
        d = 0
        while node:
            node, d = self.blocks[node].parent, d + 1
        return d

    def sequences(self) -> list[list[int]]:
        """The token ids of every root-to-leaf chain: what the cache holds, block by block."""
        out = []

        def walk(node: int, prefix: list[int]) -> None:
            b = self.blocks[node]
            ids = prefix + b.tokens
            if not b.children:
                out.append(ids)
            for child in b.children:
                walk(child, ids)

        for root in self.roots:
            walk(root, [])
        return out

    def cached_prefix(self, ids: list[int], block_size: int) -> int:
        """How many leading tokens of `ids` the cache holds: whole blocks along one chain, as vLLM's lookup finds."""
        children, n = self.roots, 0
        while n + block_size <= len(ids):
            want = ids[n:n + block_size]
            step = next((c for c in children if self.blocks[c].tokens == want), None)
            if step is None:
                break
            children, n = self.blocks[step].children, n + block_size
        return n

    def __len__(self) -> int:
        return len(self.blocks)

    # -- dropping a block and what hangs from it ------------------------------------------------------------------

    def _drop(self, node: int) -> None:
        block = self.blocks[node]
        for child in list(block.children):  # leaves first: a view evicts only leaves
            self._drop(child)
        siblings = self.blocks[block.parent].children if block.parent else self.roots
        siblings.remove(node)
        del self.blocks[node], self.by_hash[block.hash]
        self.log.emit(Evict, node=node, parent=block.parent, tokens=len(block.tokens))


def _key(h) -> object:
    """A block hash as a dict key: vLLM sends ints, or bytes (a sha256 digest), depending on its hash function."""
    return bytes(h) if isinstance(h, (bytearray, memoryview, list)) else h
