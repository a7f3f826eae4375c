"""The cache-aware router's guess at each replica's cache: one radix tree over prompts, nodes tagged by worker.

A router cannot afford to ask every replica what it has cached. SGLang's cache-aware load balancer (sgl-router,
"SGLang v0.4" release notes; vllm-router's src/tree.rs is the same tree) instead remembers what it sent where:
every request's prompt is inserted into one radix tree, and each node records the workers ("tenants") whose
requests passed through it, with when they last did. Read per worker, that is one *approximate* radix tree per
worker, overlaid:

    root ── "Reference for tenant " ─┬─ "1:\nThe json module..."  {0}     worker 0 was sent tenant 1's prompts
             {0, 1}                   └─ "2:\nA socket is..."      {1}     worker 1 was sent tenant 2's

Approximate because it never hears from the replicas: it forgets only on its own schedule (evict, to a budget of
elements per worker, least recently used leaves first) while the real KV cache evicts under memory pressure.

What the tree is over depends on the router. sgl-router never tokenizes and matches *characters* of the text
(the picture above). vllm-router 0.1.17 matches *token ids*: a prompt sent as ids is matched id by id, and a
prompt sent as text is not matched at all (it counts as "missing_tokens" in its /metrics and goes to the least
loaded worker). So the tree here is generic over sequences: give it strings and it is sgl-router's character tree,
give it lists of token ids and it is vllm-router's; "element" below means a character or a token, whichever the
prompts are, and sizes and the match rate count elements (what 0.1.17's max_tree_size counts for ids, tokens, is
read from its behaviour, not its documentation). Keep one kind per tree: a character and a token id never match.

match   walks the prompt down the tree, counting matched elements whoever holds them, and stops inside a node
        if the prompt leaves it there. It returns that count and one worker holding the node it stopped at: the
        worker that created the node (split halves keep it), or, once that worker has left it, another holder.
        So the "best-matching worker" is the one that holds the deepest point the prompt reaches.
insert  adds the prompt for a worker: it splits nodes where the prompt leaves them, tags the worker on every
        node of the path, and counts the elements newly tagged to it (`sizes[worker]`, what evict limits).
evict   per worker over its budget, removes it from its least recently used leaves (nodes it holds with no child
        it holds), cascading upwards; nodes nobody holds are dropped.
remove  forgets a worker everywhere: the router's tree after a worker dies.

Differences from the Rust, none of which changes a routing decision in a short run: the Rust stamps intermediate
nodes with time 0 and refreshes on 1 match in 8 (to save contention), here every node of an insert's path is
stamped; its stand-in holder when the creator has left is whichever a hash map yields first, here the earliest
remaining one.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from teachspec.radix.schedule import common_prefix

Prompt = str | Sequence[int]  # text (sgl-router: a character tree) or token ids (vllm-router: a token tree)


@dataclass(eq=False)
class TextNode:
    text: Prompt                                           # the elements on the edge from the parent
    parent: TextNode | None
    owner: int | None                                      # the worker that created it (what match reports)
    children: dict[str | int, TextNode] = field(default_factory=dict)   # by first element
    holders: dict[int, int] = field(default_factory=dict)  # worker -> clock of its last insert through here


@dataclass(frozen=True)
class TextMatch:
    length: int         # elements of the prompt matched (characters or tokens), by any worker
    total: int          # elements in the prompt
    worker: int | None  # a worker holding the node the match stopped in (None: nothing matched at all)

    @property
    def rate(self) -> float:
        """matched / prompt elements: what cache_aware compares with cache_threshold."""
        return self.length / self.total if self.total else 0.0

    # the character tree's names (a match over text counts characters), kept for code that reads them
    chars = property(lambda self: self.length)
    text_chars = property(lambda self: self.total)


def _common(edge: Prompt, prompt: Prompt, i: int) -> int:
    """How many elements of `edge` agree with prompt[i:]."""
    ahead = prompt[i:i + len(edge)]
    if ahead == edge:  # the usual case, compared at C speed: the whole edge
        return len(edge)
    return common_prefix(edge, ahead)  # element by element: characters or token ids alike


def _edge(prompt: Prompt, i: int, j: int | None = None) -> Prompt:
    """prompt[i:j] as an edge: a str stays one, token ids become a tuple (immutable, compared by value)."""
    part = prompt[i:j]
    return part if isinstance(part, str) else tuple(part)


class ApproxTree:
    """The router's multi-worker radix tree over characters or token ids; see the module docstring."""

    def __init__(self) -> None:
        self.root = TextNode("", None, None)
        self.sizes: dict[int, int] = {}  # worker -> elements tagged to it
        self._clock = itertools.count(1)

    @property
    def chars(self) -> dict[int, int]:
        """`sizes` under the character tree's name."""
        return self.sizes

    def match(self, prompt: Prompt) -> TextMatch:
        """The longest prefix of `prompt` in the tree, and a worker holding where it ends; changes nothing."""
        prompt = _edge(prompt, 0)
        node, i = self.root, 0
        while i < len(prompt) and (child := node.children.get(prompt[i])) is not None:
            n = _common(child.text, prompt, i)
            i += n
            node = child
            if n < len(child.text):  # the prompt leaves this node part way: it still picks the worker
                break
        return TextMatch(i, len(prompt), self._holder(node))

    def _holder(self, node: TextNode) -> int | None:
        if node.owner in node.holders:
            return node.owner
        return next(iter(node.holders), None)

    def insert(self, prompt: Prompt, worker: int) -> None:
        """Record that `prompt` was sent to `worker`."""
        prompt = _edge(prompt, 0)
        now = next(self._clock)
        self.sizes.setdefault(worker, 0)
        self.root.holders.setdefault(worker, now)
        node, i = self.root, 0
        while i < len(prompt):
            child = node.children.get(prompt[i])
            if child is None:  # the rest of the prompt is a new leaf
                child = TextNode(prompt[i:], node, worker)
                node.children[prompt[i]] = child
            else:
                n = _common(child.text, prompt, i)
                if n < len(child.text):
                    child = self._split(child, n)
            if worker not in child.holders:
                self.sizes[worker] += len(child.text)
            child.holders[worker] = now
            i += len(child.text)
            node = child

    def _split(self, node: TextNode, at: int) -> TextNode:
        """Cut `node` after `at` elements; the new head keeps its holders and its owner."""
        head = TextNode(node.text[:at], node.parent, node.owner, holders=dict(node.holders))
        node.parent.children[head.text[0]] = head
        node.text, node.parent = node.text[at:], head
        head.children[node.text[0]] = node
        return head  # its holders' elements were counted already, as part of node's

    def _leaf_for(self, node: TextNode, worker: int) -> bool:
        return worker in node.holders and not any(worker in c.holders for c in node.children.values())

    def _drop(self, node: TextNode, worker: int) -> None:
        del node.holders[worker]
        self.sizes[worker] -= len(node.text)
        if not node.holders and not node.children:
            del node.parent.children[node.text[0]]

    def evict(self, max_size: int) -> None:
        """Bring every worker down to at most `max_size` elements, least recently used leaves first."""
        over = {w for w, n in self.sizes.items() if n > max_size}
        if not over:
            return
        heap, stack = [], [self.root]
        ids = itertools.count()  # ties in time broken by discovery order: nodes are never compared
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node is not self.root:
                heap += [(node.holders[w], next(ids), w, node) for w in over if self._leaf_for(node, w)]
        heapq.heapify(heap)
        while heap:
            _, _, worker, node = heapq.heappop(heap)
            if self.sizes[worker] <= max_size or not self._leaf_for(node, worker):
                continue
            parent = node.parent
            self._drop(node, worker)
            if parent is not self.root and self._leaf_for(parent, worker):  # the cascade
                heapq.heappush(heap, (parent.holders[worker], next(ids), worker, parent))

    def remove(self, worker: int) -> None:
        """Forget `worker` everywhere, leaves first."""
        stack, order = [self.root], []
        while stack:  # parents before children; dropped in reverse, children first
            node = stack.pop()
            order.append(node)
            stack.extend(node.children.values())
        for node in reversed(order):
            if node is not self.root and worker in node.holders:
                self._drop(node, worker)
        self.root.holders.pop(worker, None)
        self.sizes.pop(worker, None)

    def size(self, worker: int) -> int:
        """Elements tagged to `worker`: the size of its approximate tree."""
        return self.sizes.get(worker, 0)
