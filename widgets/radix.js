// RadixTreeView's drawing: the tree as SVG boxes that glide to their new places, a legend, and the memory bar.
// Python (teachspec/widgets/radix.py and layout.py) decides every node's place, text and state.
//
// Labels are the nodes' own text, wrapped over two lines at 15 px; the drawing is scaled to fit the view's width
// and height, but never below 14 px text. Python folds a wide tree so that it fits (radix.py `columns`); where the
// box is narrower still, it scrolls to the nodes the caption names (meta.focus), so they are always in view. The
// zoom buttons enlarge the drawing, and shrink it back to that floor, never past it. Hovering or clicking a node
// marks the tokens it holds in a SpeculationView of the same log; hovering a token there marks the node that
// holds it here. DOM hooks: each node data-node-id, each legend entry data-legend, a marked node data-highlight,
// the view data-scale (the drawing's scale).
import {
  TREE, TREE_LEGEND, Timeline, decodeFrames, edgePath, fitScale, focusBox, holds, memorySegments, nodeClass,
  nodeLabel, nodeSpot, scrollToShow, treeSize,
} from "./helpers.js";
import { HOLD, announce, createPlayer, follow } from "./player.js";

const SVG = "http://www.w3.org/2000/svg";

function svgElement(tag, attributes = {}) {
  const e = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) e.setAttribute(name, value);
  return e;
}

function newNode(key) {
  const g = svgElement("g");
  g.dataset.key = key;
  const badge = svgElement("g", { class: "badge" }); // "2 locks", on the box's top edge
  badge.append(svgElement("rect", { height: 20, rx: 10, y: -10 }), svgElement("text", { y: 5 }));
  g.append(svgElement("rect", { width: TREE.width, height: TREE.height, rx: 8 }),
    svgElement("text", { x: TREE.width / 2, y: 22, class: "head" }),
    svgElement("text", { x: TREE.width / 2, y: 41, class: "head" }),
    svgElement("text", { x: TREE.width / 2, y: 61, class: "tail" }),
    svgElement("title"), badge);
  return g;
}

// The locks of a node as a pill on its top edge, right-aligned: the words of the "in use" border.
function drawBadge(badge, locks) {
  badge.style.display = locks ? "" : "none";
  const words = locks ? `${locks} lock${locks === 1 ? "" : "s"}` : "";
  badge.children[1].textContent = words;
  if (!locks) return;
  const width = 12 + 8.6 * words.length; // 15 px text, about 8.6 px a character
  badge.children[0].setAttribute("x", TREE.width - 4 - width);
  badge.children[0].setAttribute("width", width);
  badge.children[1].setAttribute("x", TREE.width - 4 - width / 2);
}

function legend(parent) {
  const box = document.createElement("div");
  box.className = "ts-legend ts-tree-legend";
  for (const [key, label, meaning] of TREE_LEGEND) {
    const entry = document.createElement("span");
    entry.className = `ts-key ${key}`;
    entry.dataset.legend = key;
    entry.title = meaning;
    const swatch = document.createElement("i");
    entry.append(swatch, label);
    box.append(entry);
  }
  parent.append(box);
  return box;
}

function drawMemory(box, meta) {
  const segments = memorySegments(meta);
  const track = document.createElement("div");
  track.className = "ts-memory-track";
  const words = document.createElement("div");
  words.className = "ts-memory-words";
  for (const s of segments) {
    const part = document.createElement("div");
    part.className = `ts-mem ${s.cls}`;
    part.style.width = `${(100 * s.share).toFixed(2)}%`;
    track.append(part);
    const word = document.createElement("span");
    word.className = `ts-mem-word ${s.cls}`;
    word.textContent = `${s.name} ${s.tokens}`;
    words.append(word);
  }
  const over = meta.free != null && meta.free < 0 ? ` · over budget by ${-meta.free} tokens` : "";
  const budget = meta.budget != null ? ` of ${meta.budget}` : "";
  words.append(`tokens${budget} · ${meta.nodes ?? 0} nodes${over}`);
  box.replaceChildren(track, words);
}

function zoomButton(label, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "ts-btn ts-zoom";
  b.textContent = label;
  b.title = title;
  return b;
}

function render({ model, el }) {
  el.classList.add("ts-view", "ts-radix");
  const link = model.get("link") ?? "";
  el.dataset.link = link;
  const keys = legend(el);
  const program = document.createElement("div"); // the program step running (teachspec.program), if any
  program.className = "ts-program";
  const caption = document.createElement("div");
  caption.className = "ts-caption";
  const wrap = document.createElement("div");
  wrap.className = "ts-tree-wrap";
  const zoom = document.createElement("div");
  zoom.className = "ts-zoom-bar";
  const out = zoomButton("−", "zoom out"), fit = zoomButton("fit", "fit the tree to the width"),
    into = zoomButton("+", "zoom in");
  zoom.append(out, fit, into);
  keys.append(zoom); // at the legend's right end: a row less above the tree
  const svg = svgElement("svg", { class: "ts-tree" });
  const edges = svgElement("g", { class: "edges" });
  const nodes = svgElement("g", { class: "nodes" });
  svg.append(edges, nodes);
  wrap.append(svg);
  const memory = document.createElement("div");
  memory.className = "ts-memory";
  const message = document.createElement("div");
  message.className = "ts-empty";
  const error = document.createElement("div");
  error.className = "ts-error";
  el.append(program, caption, wrap, memory, message, error);

  const timeline = new Timeline(decodeFrames(model.get("frames_json")));
  const boxes = new Map(), lines = new Map(); // item key -> its <g> and the <path> to its parent
  let state = null, scale = null, size = { width: 0, height: 0 }; // scale null: fit to the width
  let hovered = null, pinned = null, token = null; // node keys marked by the pointer or a click; a text token

  function place() {
    const tall = parseFloat(getComputedStyle(wrap).maxHeight) || 440; // the view's height, before it scrolls
    const s = scale ?? Math.min(fitScale(size.width, wrap.clientWidth - 2), fitScale(size.height, tall - 4));
    // rounded up: the drawing's scale is never below s, so its labels never below 14 px
    svg.setAttribute("width", Math.ceil(size.width * s));
    svg.setAttribute("height", Math.ceil(size.height * s));
    el.dataset.scale = s.toFixed(4);
    out.disabled = s <= TREE.minScale + 1e-9;
    into.disabled = s >= 3 - 1e-9;
    keepFocus(s);
  }

  // Scroll the tree's box (never the page) so that the nodes the caption names are inside it, when the drawing is
  // bigger than the box: a narrow box, a deep tree, a zoom.
  function keepFocus(s) {
    const box = state && focusBox(state.meta.focus, state.items);
    if (!box) return;
    wrap.scrollLeft = scrollToShow(box.left * s, box.right * s, wrap.scrollLeft, wrap.clientWidth);
    wrap.scrollTop = scrollToShow(box.top * s, box.bottom * s, wrap.scrollTop, wrap.clientHeight);
  }

  function mark() {
    for (const [key, g] of boxes) {
      const item = state.items.get(key);
      const on = key === (hovered ?? pinned) || (token !== null && item && !item.stub && item.parent !== null &&
        holds(item, { kind: "token", ...token }));
      g.toggleAttribute("data-highlight", Boolean(on));
    }
  }

  function draw() {
    const items = [...state.items.values()];
    size = treeSize(items);
    svg.setAttribute("viewBox", `0 0 ${size.width} ${size.height}`);
    place();
    for (const item of items) {
      let g = boxes.get(item.key);
      if (!g) {
        g = newNode(item.key);
        boxes.set(item.key, g);
        nodes.append(g);
      }
      g.dataset.nodeId = item.stub ? `+${item.parent.slice(1)}` : String(item.id);
      const spot = nodeSpot(item);
      g.style.transform = `translate(${spot.x}px, ${spot.y}px)`;
      g.setAttribute("class", nodeClass(item));
      const { lines: label, tail } = nodeLabel(item);
      const one = label.length === 1;
      g.children[1].textContent = label[0] ?? "";
      g.children[1].setAttribute("y", one ? 30 : 22);
      g.children[2].textContent = one ? "" : label[1];
      g.children[3].textContent = tail;
      const locks = item.locks ? ` (${item.locks} lock${item.locks === 1 ? "" : "s"}: in use)` : "";
      g.children[4].textContent = item.stub ? `${item.folded} nodes folded: the least recently used`
        : `${item.text ?? (item.ids ? item.ids.join(" ") : `node ${item.id}`)}${locks}`;
      drawBadge(g.children[5], item.stub ? 0 : item.locks ?? 0);
      const parent = item.parent && state.items.get(item.parent);
      if (parent) {
        let path = lines.get(item.key);
        if (!path) {
          path = svgElement("path");
          lines.set(item.key, path);
          edges.append(path);
        }
        path.setAttribute("class",
          `edge${item.matched ? " matched" : ""}${item.proposed ? " proposed" : ""}${item.stub ? " stub" : ""}`);
        path.setAttribute("d", edgePath(parent, item));
      }
    }
    for (const [key, g] of boxes) {
      if (!state.items.has(key)) {
        g.remove();
        boxes.delete(key);
      }
    }
    for (const [key, path] of lines) {
      const item = state.items.get(key);
      if (!item || !state.items.get(item.parent)) {
        path.remove();
        lines.delete(key);
      }
    }
    if (pinned && !state.items.has(pinned)) pinned = null;
    mark();
    caption.textContent = state.caption;
    program.textContent = state.meta.program ?? "";
    program.hidden = !state.meta.program;
    drawMemory(memory, state.meta);
  }

  const player = createPlayer(el, {
    frame: model.get("frame"),
    link,
    timeline,
    before: program, // under the legend: on screen whatever the tree's height
    onShow: (n) => {
      state = timeline.stateAt(n);
      draw();
    },
    onSettle(n) {
      model.set("frame", n);
      model.save_changes();
    },
  });

  // linked views: a node tells the text which tokens it holds; a token tells the tree which node holds it
  const tell = () => {
    const item = state?.items.get(hovered ?? pinned);
    const span = item && !item.stub && item.parent !== null
      ? { offset: item.offset, tokens: item.tokens, requests: item.requests, node: item.id } : null;
    announce(HOLD, { link, from: "tree", span });
    mark();
  };
  const keyOf = (target) => target.closest?.("g[data-key]")?.dataset.key ?? null;
  nodes.addEventListener("mouseover", (e) => {
    const key = keyOf(e.target);
    if (key && key !== hovered) {
      hovered = key;
      tell();
    }
  });
  nodes.addEventListener("mouseleave", () => {
    hovered = null;
    tell();
  });
  nodes.addEventListener("click", (e) => {
    const key = keyOf(e.target);
    pinned = pinned === key ? null : key;
    tell();
  });
  const onHold = (e) => {
    if (e.detail.link !== link || e.detail.from === "tree" || !state) return;
    token = e.detail.token;
    mark();
  };
  if (link) document.addEventListener(HOLD, onHold);

  out.addEventListener("click", () => { // down to the fit, and never below 14 px labels
    scale = Math.max(TREE.minScale, (scale ?? Number(el.dataset.scale)) / 1.25);
    place();
  });
  into.addEventListener("click", () => {
    scale = Math.min(3, (scale ?? Number(el.dataset.scale)) * 1.25);
    place();
  });
  fit.addEventListener("click", () => {
    scale = null;
    place();
  });
  // the view's width changes (a window resized, a sidebar opened): fit again
  const resize = typeof ResizeObserver === "undefined" ? null : new ResizeObserver(() => state && place());
  resize?.observe(wrap);

  const stop = follow(model, timeline, player, message, error);
  return () => {
    document.removeEventListener(HOLD, onHold);
    resize?.disconnect();
    stop();
  };
}

export default { render };
