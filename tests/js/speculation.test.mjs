// The speculation view's words for a tree step (widgets/speculation.js): its rejected mark shows each refused
// token once and explains every sibling tried there; its emitted tokens name their node. Under
// `node --test tests/js`.
import assert from "node:assert/strict";
import { test } from "node:test";

import { detailRows, explain, guesses, note, place, refusedTokens } from "../../widgets/speculation.js";

// Two children of one node refused at position 13: node 3 "default", then node 4 " __"; node 5, drawn
// independently, held " __" again and was refused too (the residual has nothing left there).
const mark = {
  key: "t2", kind: "rejected", request: 0, step: 0, position: 13, siblings: [
    { node: 3, token: 906, text: "default", p: 0.000365, q: 0.000736, u: 0.89 },
    { node: 4, token: 510, text: " __", p: 0, q: 0.0138, u: 0.4 },
    { node: 5, token: 510, text: " __", p: 0, q: 0.0138, u: 0.05 },
  ],
};

test("a rejected mark shows each refused token once, in the order tried", () => {
  assert.deepEqual(refusedTokens(mark), [{ token: 906, text: "default" }, { token: 510, text: " __" }]);
  assert.deepEqual(refusedTokens({ kind: "rejected", token: 3 }), []); // a chain's rejected guess is no mark
});

test("a rejected mark explains every sibling tried at its position with its own numbers", () => {
  const words = explain(mark);
  assert.ok(words.startsWith('refused here: node 3 "default" (u = 0.89 ≥ min(1, p/q) = min(1, 0.000365/0.000736) = ' +
    "0.496)"), words);
  assert.match(words, /node 4 " __" \(u = 0\.4 ≥ min\(1, p\/q\) = min\(1, 0\/0\.0138\) = 0\); node 5 " __"/);
  assert.match(words, /residual/);
  assert.equal(place(mark), "rejected, position 13, 3 siblings refused");
  const rows = detailRows(mark); // one row of bars per sibling, none of them chosen
  assert.deepEqual(rows.map((r) => [r.token, r.p, r.q, r.chosen]),
    [[906, 0.000365, 0.000736, false], [510, 0, 0.0138, false], [510, 0, 0.0138, false]]);
});

test("a tree step's emitted tokens name their node; a chain's keep the chain's words", () => {
  const accepted = { kind: "accepted", node: 2, position: 14, p: 0.484, q: 0.716, u: 0.116 };
  assert.ok(explain(accepted).startsWith("node 2 of the tree: u = 0.116 < min(1, p/q) = min(1, 0.484/0.716) = 0.676"));
  assert.equal(place(accepted), "accepted, position 14, node 2 of the tree");
  assert.match(explain({ kind: "resampled", node: 1, position: 13 }), /every child of node 1 was refused/);
  assert.match(explain({ kind: "bonus", node: 5, p: 0.3 }), /node 5, a leaf of the tree/);
  const chain = { kind: "resampled", i: 2, position: 9 };
  assert.match(explain(chain), /where guess 2 was rejected/);
  assert.equal(place(chain), "resampled, position 9, guess 2");
  assert.deepEqual(detailRows({ kind: "accepted", token: 4, text: "x", p: 0.5, q: 0.5 }).map((r) => r.token), [4]);
});

test("a step says how it guessed", () => {
  assert.equal(guesses({ drafted: 6, tree: true }), "a tree of 6 guesses");
  assert.equal(guesses({ drafted: 1 }), "1 guess");
  assert.equal(guesses({ drafted: 3 }), "3 guesses");
});

test("the note under the bars is true: a guess waits for p, a token without alternatives had none", () => {
  const top = [[4, 0.5, "x"], [7, 0.3, "y"], [9, 0.1, "z"]];
  assert.equal(note({ kind: "accepted", token: 4, p: 0.5, q: 0.5, top_p: top, top_q: top }), "");
  assert.equal(note({ kind: "resampled", token: 4, top_residual: top }), "");
  // a guess not judged yet has no p at all, whatever record_top the engine has (lecture 7 records 3)
  assert.match(note({ kind: "drafted", token: 4, q: 0.5 }), /^Waiting for the target pass/);
  // judged without alternatives: the engine recorded none
  assert.match(note({ kind: "bonus", token: 4, p: 1, top_p: null }), /recorded no alternatives.*record_top=5/);
  assert.match(note(mark), /TokenTreeView/);
});
