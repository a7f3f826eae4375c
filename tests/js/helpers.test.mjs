// The views' pure helpers (widgets/helpers.js), under `node --test tests/js`.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  LEGEND, SPEEDS, TREE, Timeline, alternatives, applyFrame, barScale, decision, decodeFrames, edgePath, emptyState,
  flowText, fmt, focusOf,
  memorySegments, nodeClass, nodeLines, nodeSpot, pct, shorten, sig, statsStrip, stepDelay, tokenClass, tokenLabel,
  treeSize,
} from "../../widgets/helpers.js";

const frame = (event, put = [], drop = [], meta) =>
  ({ event, caption: `event ${event}`, put, drop, ...(meta ? { meta } : {}) });

// A few frames in which items come, change and go, and meta changes now and then.
function someFrames(n, seed = 1) {
  let s = seed;
  const random = () => ((s = (s * 48271) % 2147483647) / 2147483647);
  const live = new Set(), frames = [];
  for (let e = 0; e < n; e++) {
    const put = [], drop = [];
    for (let j = 0; j < 3; j++) {
      const key = `k${Math.floor(random() * 12)}`;
      if (random() < 0.3 && live.has(key) && !put.some((i) => i.key === key)) {
        drop.push(key);
        live.delete(key);
      } else if (!drop.includes(key)) {
        put.push({ key, x: Math.floor(random() * 100), e });
        live.add(key);
      }
    }
    frames.push(frame(2 * e, put.filter((i, k, all) => all.findIndex((j) => j.key === i.key) === k), drop,
      random() < 0.5 ? { e } : undefined));
  }
  return frames;
}

function plain(state) {
  const items = Object.fromEntries([...state.items].sort());
  return { items, meta: state.meta, caption: state.caption, event: state.event };
}

test("applyFrame drops, puts and keeps meta unless the frame carries one", () => {
  const s = emptyState();
  applyFrame(s, frame(0, [{ key: "a", v: 1 }, { key: "b", v: 2 }], [], { n: 1 }));
  applyFrame(s, frame(1, [{ key: "a", v: 3 }], ["b"]));
  assert.deepEqual([...s.items.values()], [{ key: "a", v: 3 }]);
  assert.deepEqual(s.meta, { n: 1 });
  assert.equal(s.caption, "event 1");
  assert.equal(s.event, 1);
});

test("frames arrive as the bytes of a JSON array, in a DataView, or already parsed", () => {
  const frames = [frame(0, [{ key: "a", text: "héllo ↵" }])];
  const bytes = new TextEncoder().encode(JSON.stringify(frames));
  const padded = new Uint8Array(bytes.length + 4);
  padded.set(bytes, 2);
  assert.deepEqual(decodeFrames(new DataView(padded.buffer, 2, bytes.length)), frames);
  assert.deepEqual(decodeFrames(bytes.buffer), frames);
  assert.deepEqual(decodeFrames(JSON.stringify(frames)), frames);
  assert.equal(decodeFrames(frames), frames);
  assert.deepEqual(decodeFrames(null), []);
});

test("a frame's focus is the last token it changed, the prompt only when it changed nothing else", () => {
  assert.equal(focusOf(frame(0, [{ key: "t1", kind: "drafted" }, { key: "t2", kind: "drafted" }])), "t2");
  assert.equal(focusOf(frame(0, [{ key: "t1", kind: "accepted" }, { key: "s0.0", kind: "step" }])), "t1");
  assert.equal(focusOf(frame(1, [{ key: "t0", kind: "prompt" }])), "t0");
  assert.equal(focusOf(frame(1, [{ key: "s0.1", kind: "step" }])), null);
  assert.equal(focusOf(frame(2, [], ["t2"])), null);
  assert.equal(focusOf(undefined), null);
});

test("Timeline.stateAt agrees with applying every frame from the start, stepping in any order", () => {
  const frames = someFrames(150);
  const expected = [];
  const s = emptyState();
  for (const f of frames) expected.push(plain(applyFrame(s, f)));
  const timeline = new Timeline(frames, 16);
  for (const n of [149, 3, 0, 77, 76, 78, 16, 15, 149, 100, 31, 32, 5]) {
    assert.deepEqual(plain(timeline.stateAt(n)), expected[n], `frame ${n}`);
  }
  assert.deepEqual(plain(timeline.stateAt(-1)), plain(emptyState()));
  assert.deepEqual(plain(timeline.stateAt(10_000)), expected[149]); // clamped to the last frame
});

test("Timeline keeps its place when frames are appended, and starts over when they are replaced", () => {
  const frames = someFrames(40);
  const timeline = new Timeline(frames.slice(0, 20));
  timeline.stateAt(19);
  timeline.setFrames(frames.map((f) => JSON.parse(JSON.stringify(f)))); // a fresh copy, as the widget sends it
  assert.equal(timeline.n, 19);
  assert.equal(timeline.length, 40);
  timeline.setFrames(someFrames(10, 7));
  assert.equal(timeline.n, -1);
});

test("Timeline.extend appends a live delta, skips frames it has, and refuses one that leaves a gap", () => {
  const frames = someFrames(30);
  const whole = new Timeline(frames);
  const timeline = new Timeline(frames.slice(0, 10));
  timeline.stateAt(9);
  assert.equal(timeline.extend(10, frames.slice(10, 15)), true);
  assert.equal(timeline.extend(12, frames.slice(12, 20)), true); // 12..14 again: only 15..19 are new
  assert.equal(timeline.n, 9);
  assert.equal(timeline.extend(25, frames.slice(25)), false); // 20..24 never came
  assert.equal(timeline.length, 20);
  for (let n = 19; n >= 0; n--) assert.deepEqual(plain(timeline.stateAt(n)), plain(whole.stateAt(n)));
});

test("tokens read as text in the flow and with visible whitespace on their own", () => {
  assert.equal(tokenLabel(" the\n", 5), "␣the↵");
  assert.equal(tokenLabel("\t", 5), "⇥");
  assert.equal(tokenLabel(null, 42), "#42");
  assert.equal(tokenLabel("", 1), "∅");
  assert.equal(flowText(" the", 5), " the");
  assert.equal(flowText(undefined, 7), "#7 ");
  assert.equal(shorten("abcdef", 4), "abc…");
  assert.equal(shorten("abc", 4), "abc");
});

test("numbers: missing values show a dash", () => {
  assert.equal(fmt(0.12345), "0.12");
  assert.equal(fmt(1, 3), "1.000");
  assert.equal(fmt(null), "–");
  assert.equal(fmt(NaN), "–");
  assert.equal(pct(0.634), "63%");
  assert.equal(sig(0.000123456), "0.000123");
  assert.equal(sig(0.5), "0.5");
  assert.equal(sig(null), "–");
  assert.equal(pct(undefined), "–");
});

test("every kind in the legend has its own class, and the prompt is not a token", () => {
  const classes = LEGEND.map(([kind]) => tokenClass(kind));
  assert.deepEqual(classes, ["tok drafted", "tok accepted", "tok rejected", "tok resampled", "tok bonus", "tok plain"]);
  assert.equal(new Set(classes).size, classes.length);
  assert.equal(tokenClass("prompt"), "prompt");
});

test("decision explains the acceptance rule with the token's own numbers", () => {
  const accepted = decision({ kind: "accepted", p: 0.5, q: 0.25, u: 0.9 });
  assert.match(accepted, /u = 0\.9 < min\(1, p\/q\) = min\(1, 0\.5\/0\.25\) = 1: accepted/);
  const rejected = decision({ kind: "rejected", p: 0.000123456, q: 0.4, u: 0.3 });
  assert.match(rejected, /u = 0\.3 ≥ min\(1, p\/q\) = min\(1, 0\.000123\/0\.4\) = 0\.000309: rejected/);
  assert.match(decision({ kind: "resampled", i: 2 }), /residual.*guess 2/);
  assert.match(decision({ kind: "bonus", p: 0.3 }), /every guess was accepted/);
  assert.match(decision({ kind: "rejected", p: 0.1, q: 0, u: 0.3 }), /\) = 1: rejected/); // q = 0: p/q is infinite
});

test("alternatives put p and q side by side, the token itself always among them", () => {
  const rows = alternatives({
    kind: "rejected", token: 9, text: "x", p: 0.05, q: 0.6,
    top_p: [[1, 0.7, "a"], [2, 0.2, "b"]], top_q: [[9, 0.6, "x"], [1, 0.3, "a"]],
  });
  assert.deepEqual(rows.map((r) => r.token), [1, 2, 9]);
  assert.deepEqual(rows[0], { token: 1, text: "a", p: 0.7, q: 0.3, chosen: false });
  assert.deepEqual(rows[1], { token: 2, text: "b", p: 0.2, q: null, chosen: false });
  assert.deepEqual(rows[2], { token: 9, text: "x", p: 0.05, q: 0.6, chosen: true });
  const residual = alternatives({ kind: "resampled", token: 4, top_residual: [[4, 0.8, "y"], [5, 0.2, "z"]] });
  assert.deepEqual(residual[0], { token: 4, text: "y", r: 0.8, chosen: true });
  assert.equal(barScale(rows), 0.7); // bars are drawn relative to the largest probability shown
  assert.equal(barScale([{ token: 1, p: null, q: null }]), 1);
  // a bonus token has no q: only the target judged it
  assert.equal(alternatives({ kind: "bonus", token: 3, p: 0.4, q: 0.9 })[0].q, null);
});

test("the stats strip shows dashes until the log has the numbers", () => {
  const empty = statsStrip({});
  assert.ok(empty.every(([, value]) => value === "–"));
  const full = statsStrip({ alpha: 0.8, tokens_per_pass: 3.36, k: 4, c: 0.05, predicted: 2.8, measured: 2.5 });
  assert.deepEqual(full.map(([, v]) => v), ["0.80", "3.36", "4.0", "0.050", "2.80×", "2.50×"]);
});

test("the memory bar splits the budget three ways, and stretches when the cache is over it", () => {
  const seg = memorySegments({ in_use: 10, cached: 30, budget: 100 });
  assert.deepEqual(seg.map((s) => [s.cls, s.tokens, s.share]),
    [["in-use", 10, 0.1], ["cached", 30, 0.3], ["free", 60, 0.6]]);
  const over = memorySegments({ in_use: 50, cached: 150, budget: 100 });
  assert.equal(over.reduce((a, s) => a + s.share, 0), 1);
  assert.equal(over[2].tokens, 0);
  const none = memorySegments({ in_use: 0, cached: 0, budget: null });
  assert.deepEqual(none.map((s) => s.share), [0, 0]);
});

test("tree geometry: spots, size and edges follow the layout's columns and rows", () => {
  const root = { key: "n0", x: 1, y: 0 }, leaf = { key: "n1", x: 2, y: 1 };
  assert.deepEqual(nodeSpot(leaf), { x: TREE.pad + 2 * TREE.column, y: TREE.pad + TREE.row });
  assert.deepEqual(treeSize([root, leaf]),
    { width: 2 * TREE.pad + 2 * TREE.column + TREE.width, height: 2 * TREE.pad + TREE.row + TREE.height });
  const d = edgePath(root, leaf);
  assert.match(d, /^M [\d.]+ [\d.]+ C /);
  assert.ok(d.startsWith(`M ${nodeSpot(root).x + TREE.width / 2} ${nodeSpot(root).y + TREE.height}`));
});

test("node labels and classes", () => {
  assert.deepEqual(nodeLines({ parent: null, id: 0 }), ["root", ""]);
  assert.deepEqual(nodeLines({ parent: "n0", id: 3, text: " hello world, again", tokens: 5, locks: 2 }),
    ["␣hello␣world,␣a…", "#3 · 5 tok · 2 locks"]);
  assert.deepEqual(nodeLines({ parent: "n0", id: 4, ids: [7, 8], tokens: 2, locks: 1 }),
    ["7 8", "#4 · 2 tok · 1 lock"]);
  assert.deepEqual(nodeLines({ parent: "n0", id: 5, tokens: 3, locks: 0 }), ["#5", "3 tok"]);
  assert.deepEqual(nodeLines({ stub: true, parent: "n0", folded: 12, tokens: 80 }), ["+12 nodes", "80 tok folded"]);
  assert.equal(nodeClass({ parent: "n0", mark: "new", matched: true, locks: 1 }), "ts-node new matched locked");
  assert.equal(nodeClass({ parent: null }), "ts-node root");
  assert.equal(nodeClass({ parent: "n3", proposed: true }), "ts-node proposed"); // a suffix tree's guess
  assert.equal(nodeClass({ parent: "n1", stub: true }), "ts-node stub");
});

test("playing: speeds scale the delay, and a live view that fell behind catches up quickly", () => {
  assert.ok(SPEEDS.includes(1));
  assert.equal(stepDelay(1), 500);
  assert.equal(stepDelay(4), 125);
  assert.equal(stepDelay(1, 100), 16);
  assert.equal(stepDelay(1, 4), 100);
  assert.equal(stepDelay(0.25, 1), 2000);
});
