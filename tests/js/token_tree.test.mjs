// The token tree view's pure helpers (widgets/token_tree.js): where the tree-step buttons go, the geometry, the
// words on a node. Under `node --test tests/js`.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  TOKEN_TREE, boxLines, stepAt, stepEnds, stepJump, tokenEdge, tokenTreeSize,
} from "../../widgets/token_tree.js";

const frame = (put = []) => ({ event: 0, caption: "", put, drop: [] });
const step = (index) => ({ key: "step", index });

test("a tree step ends where the next one's step item first appears", () => {
  const frames = [
    frame([step(0), { key: "n0" }]), frame([step(0)]), frame([{ key: "n1" }]), frame([step(0), { key: "final" }]),
    frame([step(1), { key: "n0" }]), frame([{ key: "n1" }]),
    frame([step(2)]),
  ];
  assert.deepEqual(stepEnds(frames), [3, 5, 6]);
  assert.deepEqual(stepEnds([]), []);
  assert.deepEqual([0, 3, 4, 6, -1].map((n) => stepAt([3, 5, 6], n)), [0, 0, 1, 2, 0]);
});

test("the tree-step buttons go to the end of a step, forwards and backwards", () => {
  const ends = [3, 5, 6];
  assert.deepEqual([0, 2, 3, 4, 5, 6].map((n) => stepJump(ends, n, 1)), [3, 3, 5, 5, 6, 6]);
  assert.deepEqual([0, 2, 3, 4, 5, 6].map((n) => stepJump(ends, n, -1)), [0, 0, 0, 3, 3, 5]);
  assert.equal(stepJump(ends, -1, 1), 3); // before any frame: the first step, complete
  assert.equal(stepJump([], 0, 1), 0);
});

test("the tree reads left to right: a node's column is its depth, an edge joins right side to left side", () => {
  const root = { x: 0, y: 0.5 }, child = { x: 1, y: 1 };
  const size = tokenTreeSize([root, child, { x: 1, y: 0 }]);
  assert.equal(size.width, 2 * TOKEN_TREE.pad + TOKEN_TREE.column + TOKEN_TREE.width);
  assert.equal(size.height, 2 * TOKEN_TREE.pad + TOKEN_TREE.row + TOKEN_TREE.height);
  const [x1, y1] = tokenEdge(root, child).split(" ").slice(1, 3).map(Number);
  assert.equal(x1, TOKEN_TREE.pad + TOKEN_TREE.width);
  assert.equal(y1, TOKEN_TREE.pad + 0.5 * TOKEN_TREE.row + TOKEN_TREE.height / 2);
});

test("under a node's token: its verdict, or what it is", () => {
  const verdict = ["p/q 0.415", "u 0.677 ≥ p/q"];
  assert.deepEqual(boxLines({ key: "n3", state: "rejected", verdict }), verdict);
  assert.deepEqual(boxLines({ key: "n0", state: "root" }), ["root", "committed"]);
  assert.deepEqual(boxLines({ key: "n4", state: "drafted" }), ["waiting", ""]);
  assert.deepEqual(boxLines({ key: "n5", state: "untried" }), ["not tried", ""]);
  assert.deepEqual(boxLines({ key: "final", kind: "resampled", p: 0.60712 }), ["resampled", "p 0.607"]);
});
