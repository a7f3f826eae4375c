// The helpers behind what a lecture hall sees (widgets/helpers.js): token chips, the folded prompt, the focus,
// linked views, the time lane and the tree's labels and fit. Under `node --test tests/js`.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  TREE, chipParts, fitScale, focusAt, focusBox, frameAtEvent, holds, laneRows, nodeLabel, nodeSpot, promptSummary,
  scrollToShow, stepKey,
} from "../../widgets/helpers.js";

const frame = (event, put = [], drop = []) => ({ event, caption: "", put, drop });

test("every token is a chip that shows its whitespace, and a newline also breaks the line after it", () => {
  assert.deepEqual(chipParts(" the", 1), { parts: [{ text: "·", ws: true }, { text: "the", ws: false }], breaks: 0 });
  assert.deepEqual(chipParts("\n", 2), { parts: [{ text: "↵", ws: true }], breaks: 1 });
  assert.deepEqual(chipParts("\n\n", 2).breaks, 2);
  assert.deepEqual(chipParts("\t", 3).parts, [{ text: "⇥", ws: true }]);
  assert.deepEqual(chipParts(null, 436).parts, [{ text: "#436", ws: false }]);
  assert.equal(chipParts("", 5).parts[0].text, "∅"); // never an empty, unclickable chip
  for (const text of [" ", "\n", "  ", "\r\n"]) {
    assert.ok(chipParts(text, 0).parts.every((p) => p.text.trim().length > 0), JSON.stringify(text));
  }
});

test("a long prompt folds into one chip naming its length and its last line", () => {
  const item = { kind: "prompt", n: 133, text: "System: be brief.\n\nUser: what is a radix tree?\n", ids: [1, 2] };
  assert.equal(promptSummary(item), "prompt · 133 tokens · …User: what is a radix tree?");
  const long = { ...item, text: `x\n${"word ".repeat(30)}` };
  const summary = promptSummary(long);
  assert.ok(summary.length < 80 && summary.includes("· …") && summary.endsWith("word"), summary);
  assert.equal(promptSummary({ kind: "prompt", n: 1, text: "hi", ids: [7] }), "prompt · 1 token · hi");
  assert.equal(promptSummary({ kind: "prompt", n: 40, text: null, ids: [5, 6, 7] }), "prompt · 40 tokens · …5 6 7");
});

test("the focus stays on the last decided token through frames that decide nothing", () => {
  const frames = [
    frame(0, [{ key: "t0", kind: "prompt" }]),
    frame(1, [{ key: "t1", kind: "drafted" }, { key: "t2", kind: "drafted" }, { key: "s0.0", kind: "step" }]),
    frame(2, [{ key: "s0.0", kind: "step" }]), // the target pass: no token changes
    frame(3, [{ key: "t1", kind: "accepted" }]),
    frame(4, [], ["t2"]), // a finish drops the guess that was never judged
  ];
  const items = new Map([["t0", {}], ["t1", {}], ["t2", {}]]);
  assert.deepEqual([0, 1, 2, 3].map((n) => focusAt(frames, n, items)), ["t0", "t2", "t2", "t1"]);
  items.delete("t2");
  assert.equal(focusAt(frames, 4, items), "t1");
  assert.equal(focusAt(frames, -1, items), null);
});

test("a linked view goes to its last frame at or before the event another view shows", () => {
  const frames = [frame(3), frame(7), frame(8), frame(20)];
  assert.deepEqual([0, 3, 6, 7, 8, 19, 20, 99].map((e) => frameAtEvent(frames, e)), [-1, 0, 0, 1, 2, 2, 3, 3]);
  assert.equal(frameAtEvent([], 5), -1);
});

test("a tree node holds the tokens at its offset in the requests that run through it", () => {
  const node = { offset: 4, tokens: 3, requests: [0, 2] };
  const token = (request, position) => ({ kind: "accepted", request, position });
  assert.deepEqual([3, 4, 6, 7].map((p) => holds(node, token(0, p))), [false, true, true, false]);
  assert.equal(holds(node, token(1, 5)), false); // another request's token at the same place
  assert.equal(holds(node, { kind: "prompt", request: 2, n: 5 }), true); // the prompt covers positions 0 .. 4
  assert.equal(holds(node, { kind: "prompt", request: 2, n: 4 }), false);
  assert.equal(holds(null, token(0, 4)), false);
});

test("the lane puts every step's passes on one time axis with plain decoding's", () => {
  const steps = [
    { request: 0, step: 0, drafted: 3, draft_ms: 3, verify_ms: 4, emitted: 4 },
    { request: 0, step: 1, drafted: 0, draft_ms: 0, verify_ms: 4, emitted: 1 }, // plain decoding: a pass, a token
  ];
  const { spec, plain, specMs, plainMs } = laneRows(steps);
  assert.deepEqual(spec.map((s) => [s.kind, s.key]), [["draft", "s0.0"], ["target", "s0.0"], ["target", "s0.1"]]);
  assert.equal(specMs, 11);
  assert.equal(plainMs, 20); // five tokens, one target pass each
  assert.equal(plain.length, 5);
  const end = (row) => row[row.length - 1].start + row[row.length - 1].width;
  assert.ok(Math.abs(end(plain) - 1) < 1e-9 && Math.abs(end(spec) - 11 / 20) < 1e-9); // to scale
  assert.equal(stepKey(steps[1]), "s0.1");
  assert.deepEqual(laneRows([]), { spec: [], plain: [], specMs: 0, plainMs: 0 });
});

test("a node's label wraps its text over two lines and ends in … only when it does not fit", () => {
  const node = (text) => ({ parent: "n0", id: 3, text, tokens: 5, locks: 0 });
  assert.deepEqual(nodeLabel(node("hello")), { lines: ["hello"], tail: "#3 · 5 tok" });
  const { lines } = nodeLabel(node(" the quick brown fox jumps over"));
  assert.equal(lines.length, 2);
  assert.ok(lines.every((l) => l.length <= TREE.chars), lines);
  assert.ok(lines[0].startsWith("␣the") && lines[1].endsWith("…"), lines);
  assert.deepEqual(nodeLabel(node("a b c d e f g h i j k")).lines.join(""), "a␣b␣c␣d␣e␣f␣g␣h␣i␣j␣k");
  assert.deepEqual(nodeLabel({ parent: null, id: 0 }).lines, ["root"]);
  // the locks are a badge of their own (radix.js): "#3 · 5 tok · 2 locks" would not fit a box
  assert.equal(nodeLabel({ ...node("hello"), locks: 2 }).tail, "#3 · 5 tok");
});

test("the tree's box follows the nodes the caption names, and stays put while they are in view", () => {
  const items = new Map([["n0", { x: 1, y: 0 }], ["n12", { x: 5, y: 1 }], ["n13", { x: 5, y: 2 }]]);
  const box = focusBox(["n12", "n13", "n99"], items); // n99: not drawn, left out
  assert.deepEqual(box, { left: nodeSpot({ x: 5 }).x, top: nodeSpot({ y: 1 }).y,
    right: nodeSpot({ x: 5 }).x + TREE.width, bottom: nodeSpot({ y: 2 }).y + TREE.height });
  assert.equal(focusBox([], items), null);
  assert.equal(focusBox(["n99"], items), null);
  assert.equal(scrollToShow(100, 200, 50, 400), 50); // inside: no scroll, so a steady tree does not jump
  assert.equal(scrollToShow(700, 800, 50, 400), 550); // outside: centred on it
  assert.equal(scrollToShow(10, 60, 300, 400), 0); // never before the start
});

test("the tree fits the width but never shrinks its 15 px text below 14 px", () => {
  assert.equal(fitScale(800, 1000), 1000 / 800);
  assert.equal(fitScale(500, 2000), 1.25);
  assert.equal(fitScale(1050, 1000), 1000 / 1050);
  assert.equal(fitScale(5000, 1000), TREE.minScale);
  assert.ok(15 * TREE.minScale >= 14 - 1e-9);
  assert.equal(fitScale(800, 0), 1); // not laid out yet
});
