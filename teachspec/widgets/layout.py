"""Where the radix tree's nodes go on screen: a tidy layout that stays put as the tree grows, and folding.

Tidy layout, in its simplest form (after Reingold and Tilford 1981): each drawn leaf takes the next column from
left to right, each inner node sits centred over its first and last child, and a node's row is its depth.
Children are ordered by when they were created, never by their tokens, so a new leaf always lands to the right of
its older siblings. An insert therefore changes no node's row and moves nothing leftwards: nodes on the new
leaf's left stay where they are (its ancestors excepted, which re-centre over their children), nodes on its
right shift one column, and the leaves keep their order. A split puts a new node above the one it cuts, so that
subtree moves down one row, and nothing moves sideways. (tests/widgets/test_widgets_layout.py checks all of this.)

Folding: a few hundred nodes are too many to read (and to animate), so at most `max_nodes` are drawn, in at most
`max_columns` columns: a wide tree would otherwise shrink its labels below what the back of a lecture hall can
read, or run off the side of its box. The nodes of the event on screen (`focus`: the ones its caption names) are
always kept, each with its path to the root; then the most recently touched nodes, in that order until the next
would not fit; nodes deeper than `max_depth` are never kept. A kept node whose children are not all kept gets one
"+N" stub, its last child, standing for the N nodes folded under it. Every step is deterministic, so replaying a
log always draws the same pictures.

The view folds after every event, so folding must not cost O(all nodes): a tree of thousands of nodes would then
take minutes to replay. The nodes carry their depth and their subtree's size, kept up to date by the view as
events arrive, and the view hands over its nodes in recency order; folding then looks at about 2 * max_nodes
nodes (each one it looks at is either kept or already kept, until one does not fit), whatever the tree's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


class TreeNode(Protocol):
    id: int
    parent: int | None            # None for the root
    children: list[int]           # in creation order
    tokens: int
    depth: int                    # the root's is 0
    size: int                     # nodes in its subtree, itself included
    weight: int                   # tokens in its subtree, its own included


@dataclass(slots=True)
class Fold:
    kept: set[int]                        # node ids drawn as themselves
    stubs: dict[int, tuple[int, int]]     # kept node id -> (nodes, tokens) folded under its "+N" stub


@dataclass(slots=True)
class Spot:
    x: float                              # column (leaves 0, 1, 2, ...); inner nodes may sit on halves
    y: int                                # row: the depth, the root on row 0


def fold(nodes: Mapping[int, TreeNode], recent: Iterable[int], max_nodes: int, max_depth: int,
         root: int = 0, max_columns: int | None = None, focus: Iterable[int] = ()) -> Fold:
    """Which nodes to draw (the `focus` ones whatever the budget, then the `recent` ones, most recent first, each
    with its path), and "+N" stubs for the rest."""
    kept, shown = {root}, {root: 0}  # shown[n]: how many of n's children are kept

    def stub(n: int, extra: int = 0) -> bool:
        return len(nodes[n].children) > shown[n] + extra

    def own(n: int, extra: int = 0) -> int:
        """The columns n takes of its own: one if no child of it is kept (as a leaf, or over its stub), else its
        stub's (its kept children count for themselves)."""
        return 1 if shown[n] + extra == 0 else int(stub(n, extra))

    focus = [n for n in focus if n in nodes]
    stubs, columns = int(stub(root)), 1
    for rank, node in enumerate([*focus, *recent]):
        if node == root or nodes[node].depth > max_depth:
            continue
        chain = []  # node and its ancestors up to (not including) the first kept one, bottom to top
        n = node
        while n not in kept:
            chain.append(n)
            n = nodes[n].parent
        if not chain:
            continue
        # stubs after adding the chain: its top's parent shows one more child; each chain node shows one child,
        # except the bottom one, which shows none yet
        added = stub(n, 1) - stub(n) + sum(len(nodes[c].children) > (i > 0) for i, c in enumerate(chain))
        # columns likewise: the bottom one takes a column, a chain node above it one more if it gets a stub
        wider = own(n, 1) - own(n) + 1 + sum(len(nodes[c].children) > 1 for c in chain[1:])
        over = len(kept) + len(chain) + stubs + added > max_nodes or (
            max_columns is not None and columns + wider > max_columns)
        if over and rank >= len(focus):  # the focus is drawn whatever it costs
            break
        stubs, columns = stubs + added, columns + wider
        shown[n] += 1
        for j, c in enumerate(chain):
            kept.add(c)
            shown[c] = int(j > 0)

    folded = {}
    for n in kept:
        hidden = [nodes[c] for c in nodes[n].children if c not in kept]
        if hidden:
            folded[n] = (sum(c.size for c in hidden), sum(c.weight for c in hidden))
    return Fold(kept, folded)


def place(nodes: Mapping[int, TreeNode], fold: Fold, root: int = 0) -> tuple[dict[int, Spot], dict[int, Spot]]:
    """Spots for the kept nodes and for the stubs (by the id of the node they hang under)."""
    spots, stub_spots, column = {}, {}, 0

    def visit(n: int, depth: int) -> None:  # recursion is as deep as the drawn tree: at most max_depth
        nonlocal column
        xs = []
        for c in nodes[n].children:
            if c in fold.kept:
                visit(c, depth + 1)
                xs.append(spots[c].x)
        if n in fold.stubs:
            stub_spots[n] = Spot(column, depth + 1)
            xs.append(column)
            column += 1
        if xs:
            spots[n] = Spot((xs[0] + xs[-1]) / 2, depth)
        else:
            spots[n] = Spot(column, depth)
            column += 1

    visit(root, 0)
    return spots, stub_spots
