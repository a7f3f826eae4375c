// TokenTreeView's drawing: the drafted tree (its nodes, its accepted path, its verdicts), the tree attention mask
// beside it, and buttons that step a whole tree step at a time. Python (teachspec/widgets/token_tree.py) decides
// every node's place, state and words; the mask's cells come from it too.
//
// The tree reads left to right like the text: a node's column is its depth. It is scaled to the view's width and
// height, never below 14 px text (a bigger tree pans). Hovering a node, or a row of the mask, marks the row and
// the nodes that row may attend to. DOM hooks: each node data-node (its number, "final" for the resampled or bonus
// token), each mask row data-row and cell data-col, each legend entry data-legend, the view data-tree-step (the
// tree step shown, from 1) and data-tree-steps.
import { Timeline, decodeFrames, fitScale, shorten, sig, tokenLabel } from "./helpers.js";
import { createPlayer, follow } from "./player.js";

const SVG_NS = "http://www.w3.org/2000/svg";

// The tree's geometry at scale 1, in px: a box holds three lines (the token, then two of verdict). Its smallest
// text is 15 px, so the fit's floor (helpers.js fitScale) keeps every label at 14 px or more.
export const TOKEN_TREE = { column: 136, row: 74, width: 118, height: 64, pad: 8 };

export function tokenSpot(item) {
  return { x: TOKEN_TREE.pad + item.x * TOKEN_TREE.column, y: TOKEN_TREE.pad + item.y * TOKEN_TREE.row };
}

export function tokenTreeSize(items) {
  let x = 0, y = 0;
  for (const item of items) {
    x = Math.max(x, item.x);
    y = Math.max(y, item.y);
  }
  const { column, row, width, height, pad } = TOKEN_TREE;
  return { width: 2 * pad + x * column + width, height: 2 * pad + y * row + height };
}

// From the middle of the parent's right side to the middle of the child's left side.
export function tokenEdge(parent, child) {
  const a = tokenSpot(parent), b = tokenSpot(child);
  const x1 = a.x + TOKEN_TREE.width, y1 = a.y + TOKEN_TREE.height / 2, x2 = b.x, y2 = b.y + TOKEN_TREE.height / 2;
  const xm = (x1 + x2) / 2;
  return `M ${x1} ${y1} C ${xm} ${y1}, ${xm} ${y2}, ${x2} ${y2}`;
}

// The last frame of each tree step. Every step's first frame puts its "step" item with a new `index`, so a step
// ends where the next one begins, and the last one at the last frame.
export function stepEnds(frames) {
  const ends = [];
  let index = null;
  frames.forEach((frame, n) => {
    const step = frame.put.find((item) => item.key === "step");
    if (step && step.index !== index) {
      if (index !== null) ends.push(n - 1);
      index = step.index;
    }
  });
  if (index !== null) ends.push(frames.length - 1);
  return ends;
}

// Which tree step frame `shown` belongs to (0-based; 0 before any frame).
export function stepAt(ends, shown) {
  const k = ends.findIndex((end) => end >= shown);
  return k === -1 ? ends.length - 1 : k;
}

// Where a tree-step button goes from frame `shown`: forward (+1) to the end of the step shown, or of the next one
// when the step shown is already complete; back (-1) to the end of the step before, or to the first frame.
export function stepJump(ends, shown, direction) {
  if (!ends.length) return shown;
  const k = stepAt(ends, shown);
  if (direction > 0) return shown < ends[k] ? ends[k] : ends[Math.min(k + 1, ends.length - 1)];
  return k > 0 ? ends[k - 1] : 0;
}

// The two lines under a node's token: its verdict ("p/q 0.0636", "u 0.412 ≥ p/q", from Python), or what it is.
export function boxLines(item) {
  if (item.key === "final") return [item.kind, `p ${sig(item.p)}`];
  if (item.verdict) return item.verdict;
  return { root: ["root", "committed"], drafted: ["waiting", ""], untried: ["not tried", ""] }[item.state] ?? ["", ""];
}

// What every colour means (each legend entry carries data-legend=its key).
export const TOKEN_TREE_LEGEND = [
  ["root", "root", "the last committed token: the target pass reads it, nothing verifies it"],
  ["drafted", "drafted", "a guess waiting for the rule"],
  ["accepted", "accepted", "kept: u < min(1, p/q); the rule moves down to it"],
  ["rejected", "rejected", "refused: u ≥ p/q; its next sibling is judged against the residual"],
  ["untried", "not tried", "never judged: under a refused node, or after an accepted sibling"],
  ["resampled", "resampled", "every child refused: drawn from the last residual norm(max(0, p − q))"],
  ["bonus", "bonus", "the path reached a leaf: drawn from p after it, free"],
  ["mask", "may attend", "a filled cell of the mask: the row's node sees that key (context, ancestors, itself)"],
];

function svgElement(tag, attributes = {}) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) e.setAttribute(name, value);
  return e;
}

function element(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function newBox(key) {
  const g = svgElement("g");
  g.dataset.key = key;
  const { width } = TOKEN_TREE;
  g.append(svgElement("rect", { width, height: TOKEN_TREE.height, rx: 8 }),
    svgElement("text", { x: 7, y: 20, class: "number" }),
    svgElement("text", { x: width / 2 + 6, y: 20, class: "token" }),
    svgElement("text", { x: width / 2, y: 39, class: "note" }),
    svgElement("text", { x: width / 2, y: 57, class: "note" }),
    svgElement("title"));
  return g;
}

function why(item, items) {
  const word = (i) => `node ${i} ${JSON.stringify(items.get(`n${i}`)?.text ?? `#${items.get(`n${i}`)?.token}`)}`;
  if (item.key === "final") {
    return item.kind === "bonus" ? `bonus: ${word(item.at)} is a leaf, so p after it gives one more token free`
      : `resampled: every child of ${word(item.at)} was refused; drawn from the last residual`;
  }
  const where = item.parent < 0 ? "the root" : `depth ${item.depth}, child of ${word(item.parent)}`;
  const numbers = item.verdict ? `: p' = ${sig(item.p)}, q' = ${sig(item.q)}, u = ${sig(item.u)}` : "";
  return `${word(item.i)} (${where}), ${item.state}${numbers}`;
}

function legend(parent) {
  const box = element("div", "ts-legend ts-tt-legend");
  for (const [key, label, meaning] of TOKEN_TREE_LEGEND) {
    const entry = element("span", `ts-key ${key}`);
    entry.dataset.legend = key;
    entry.title = meaning;
    entry.append(element("i"), label);
    box.append(entry);
  }
  parent.append(box);
}

// The mask as a table: a row per node (the queries of the one pass), a column per key.
function drawMask(table, mask, items) {
  const nodes = mask.cells.length, context = mask.context.length;
  const head = element("thead"), groups = element("tr"), keys = element("tr");
  groups.append(element("th"));
  if (context) {
    const c = element("th", "ts-mask-group", "context");
    c.colSpan = context;
    groups.append(c);
  }
  const t = element("th", "ts-mask-group", "tree nodes");
  t.colSpan = nodes;
  groups.append(t);
  keys.append(element("th"));
  for (const [token, text] of mask.context) {
    const th = element("th", "ts-mask-key context", token === null ? "…" : shorten(tokenLabel(text, token), 3));
    th.title = token === null ? "a committed token (not in the log)"
      : `committed token ${JSON.stringify(text ?? `#${token}`)}`;
    keys.append(th);
  }
  for (let j = 0; j < nodes; j++) keys.append(element("th", "ts-mask-key", String(j)));
  head.append(groups, keys);
  const body = element("tbody");
  mask.cells.forEach((cells, i) => {
    const node = items.get(`n${i}`);
    const tr = element("tr", `ts-mask-row ${node?.state ?? ""}`);
    tr.dataset.row = String(i);
    const label = element("th", "ts-mask-query", `${i} ${shorten(tokenLabel(node?.text, node?.token), 5)}`);
    tr.append(label);
    [...cells].forEach((cell, col) => {
      const td = element("td", cell === "1" ? "on" : "off");
      td.dataset.col = String(col);
      const key = col < context ? "a context token" : `node ${col - context}`;
      td.title = `node ${i} ${cell === "1" ? "may" : "may not"} attend to ${key}`;
      tr.append(td);
    });
    body.append(tr);
  });
  table.replaceChildren(head, body);
}

function render({ model, el }) {
  el.classList.add("ts-view", "ts-token-tree");
  const link = model.get("link") ?? "";
  el.dataset.link = link;
  legend(el);
  const caption = element("div", "ts-caption");
  const head = element("div", "ts-tt-head");
  const back = element("button", "ts-btn ts-tree-prev", "◀◀ tree step");
  const next = element("button", "ts-btn ts-tree-next", "tree step ▶▶");
  back.type = next.type = "button";
  back.title = "the previous tree step, complete";
  next.title = "the end of this tree step, then of the next";
  const words = element("span", "ts-tt-words");
  head.append(back, words, next);
  const totals = element("div", "ts-tt-totals");
  const body = element("div", "ts-tt-body");
  const wrap = element("div", "ts-tt-wrap");
  const svg = svgElement("svg", { class: "ts-tt-tree" });
  const edges = svgElement("g", { class: "edges" });
  const boxes = svgElement("g", { class: "nodes" });
  svg.append(edges, boxes);
  wrap.append(svg);
  const maskBox = element("div", "ts-tt-mask");
  const maskTitle = element("div", "ts-tt-mask-title", "tree attention mask");
  maskTitle.title = "a row per query (a node of the one target pass), a column per key it may attend to";
  const table = element("table", "ts-mask");
  maskBox.append(maskTitle, table);
  body.append(wrap, maskBox);
  const message = element("div", "ts-empty");
  const error = element("div", "ts-error");
  el.append(caption, head, totals, body, message, error);

  const timeline = new Timeline(decodeFrames(model.get("frames_json")));
  const drawn = new Map(), lines = new Map(); // item key -> its <g>, and the <path> to its parent
  let state = null, shown = -1, size = { width: 0, height: 0 }, marked = null;

  function place() {
    const tall = parseFloat(getComputedStyle(wrap).maxHeight) || 400;
    const s = Math.min(fitScale(size.width, wrap.clientWidth - 2), fitScale(size.height, tall - 4));
    svg.setAttribute("width", Math.round(size.width * s));
    svg.setAttribute("height", Math.round(size.height * s));
  }

  // Mark the mask's row `row` and the nodes it may attend to (null: nothing).
  function mark(row) {
    marked = row;
    const cells = row === null ? null : state?.items.get("mask")?.cells[row];
    const context = state?.items.get("mask")?.context.length ?? 0;
    for (const [key, g] of drawn) {
      const i = key.startsWith("n") ? Number(key.slice(1)) : -1;
      g.toggleAttribute("data-highlight", Boolean(cells && i >= 0 && cells[context + i] === "1"));
    }
    for (const tr of table.querySelectorAll("tr[data-row]")) {
      tr.toggleAttribute("data-highlight", row !== null && tr.dataset.row === String(row));
    }
  }

  function drawTree(items) {
    const shownItems = [...items.values()].filter((item) => item.kind === "node" || item.key === "final");
    size = tokenTreeSize(shownItems);
    svg.setAttribute("viewBox", `0 0 ${size.width} ${size.height}`);
    place();
    for (const item of shownItems) {
      let g = drawn.get(item.key);
      if (!g) {
        g = newBox(item.key);
        drawn.set(item.key, g);
        boxes.append(g);
      }
      const final = item.key === "final";
      g.dataset.node = final ? "final" : String(item.i);
      const spot = tokenSpot(item);
      g.setAttribute("transform", `translate(${spot.x} ${spot.y})`);
      g.setAttribute("class", `ts-tt-node ${final ? item.kind : item.state}`);
      g.children[1].textContent = final ? "" : String(item.i);
      g.children[2].textContent = shorten(tokenLabel(item.text, item.token), 8);
      [g.children[3].textContent, g.children[4].textContent] = boxLines(item);
      g.children[5].textContent = why(item, items);
      const parent = items.get(`n${final ? item.at : item.parent}`);
      let path = lines.get(item.key);
      if (parent && (final || item.parent >= 0)) {
        if (!path) {
          path = svgElement("path");
          lines.set(item.key, path);
          edges.append(path);
        }
        path.setAttribute("class", `edge ${final ? item.kind : item.state}`);
        path.setAttribute("d", tokenEdge(parent, item));
      } else if (path) {
        path.remove();
        lines.delete(item.key);
      }
    }
    for (const [key, g] of drawn) {
      if (!items.has(key)) {
        g.remove();
        drawn.delete(key);
        lines.get(key)?.remove();
        lines.delete(key);
      }
    }
  }

  function draw() {
    const items = state.items, step = items.get("step");
    const ends = stepEnds(timeline.frames);
    el.dataset.treeSteps = String(ends.length);
    el.dataset.treeStep = step ? String(stepAt(ends, shown) + 1) : "0";
    body.hidden = head.hidden = totals.hidden = !step;
    caption.textContent = state.caption;
    back.disabled = shown <= 0;
    next.disabled = !ends.length || shown >= ends[ends.length - 1];
    if (!step) return;
    const target = step.verify_ms == null ? "" : ` · target pass ${step.verify_ms.toFixed(1)} ms`;
    words.textContent = `tree step ${stepAt(ends, shown) + 1} / ${ends.length} · request ${step.request}, step ` +
      `${step.step}, root at position ${step.position} · ${step.drafter} drafter · ${step.nodes - 1} guesses · ` +
      `draft ${step.draft_ms.toFixed(1)} ms${target}`;
    const m = state.meta;
    totals.textContent = m.steps ? `finished tree steps: ${m.steps} · ${m.emitted} tokens from ${m.steps} target ` +
      `passes (${(m.emitted / m.steps).toFixed(2)} a pass) · ${m.accepted} guesses accepted` : "";
    drawTree(items);
    drawMask(table, items.get("mask"), items);
    mark(marked !== null && marked < step.nodes ? marked : null);
  }

  const player = createPlayer(el, {
    frame: model.get("frame"),
    link,
    timeline,
    before: caption, // under the legend, as in the other views
    onShow: (n) => {
      shown = n;
      state = timeline.stateAt(n);
      draw();
    },
    onSettle(n) {
      model.set("frame", n);
      model.save_changes();
    },
  });

  // The tree-step buttons move the player's own slider, so the player shows the frame and tells linked views.
  const slider = el.querySelector(".ts-slider");
  const jump = (direction) => {
    slider.value = String(stepJump(stepEnds(timeline.frames), shown, direction));
    slider.dispatchEvent(new Event("input"));
  };
  back.addEventListener("click", () => jump(-1));
  next.addEventListener("click", () => jump(1));

  const rowOf = (target) => {
    const g = target.closest?.("g[data-node]");
    if (g) return g.dataset.node === "final" ? null : Number(g.dataset.node);
    const tr = target.closest?.("tr[data-row]");
    return tr ? Number(tr.dataset.row) : null;
  };
  for (const area of [boxes, table]) {
    area.addEventListener("mouseover", (e) => mark(rowOf(e.target)));
    area.addEventListener("mouseleave", () => mark(null));
  }
  const resize = typeof ResizeObserver === "undefined" ? null : new ResizeObserver(() => state && place());
  resize?.observe(wrap);

  const stop = follow(model, timeline, player, message, error);
  return () => {
    resize?.disconnect();
    stop();
  };
}

export default { render };
