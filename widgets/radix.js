// RadixTreeView's drawing: the tree as SVG boxes that glide to their new places, and the memory bar.
// Python (teachspec/widgets/radix.py and layout.py) decides every node's place, text and state.
import {
  TREE, Timeline, decodeFrames, edgePath, memorySegments, nodeClass, nodeLines, nodeSpot, treeSize,
} from "./helpers.js";
import { createPlayer, follow } from "./player.js";

const SVG = "http://www.w3.org/2000/svg";

function svgElement(tag, attributes = {}) {
  const e = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) e.setAttribute(name, value);
  return e;
}

function newNode(key) {
  const g = svgElement("g");
  g.dataset.key = key;
  g.append(svgElement("rect", { width: TREE.width, height: TREE.height, rx: 6 }),
    svgElement("text", { x: TREE.width / 2, y: 17, class: "head" }),
    svgElement("text", { x: TREE.width / 2, y: 33, class: "tail" }),
    svgElement("title"));
  return g;
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

function render({ model, el }) {
  el.classList.add("ts-view", "ts-radix");
  const program = document.createElement("div"); // the program step running (teachspec.program), if any
  program.className = "ts-program";
  const caption = document.createElement("div");
  caption.className = "ts-caption";
  const wrap = document.createElement("div");
  wrap.className = "ts-tree-wrap";
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

  function draw(state) {
    const items = [...state.items.values()];
    const size = treeSize(items);
    svg.setAttribute("width", size.width);
    svg.setAttribute("height", size.height);
    svg.setAttribute("viewBox", `0 0 ${size.width} ${size.height}`);
    for (const item of items) {
      let g = boxes.get(item.key);
      if (!g) {
        g = newNode(item.key);
        boxes.set(item.key, g);
        nodes.append(g);
      }
      const spot = nodeSpot(item);
      g.style.transform = `translate(${spot.x}px, ${spot.y}px)`;
      g.setAttribute("class", nodeClass(item));
      const [head, tail] = nodeLines(item);
      g.children[1].textContent = head;
      g.children[2].textContent = tail;
      g.children[3].textContent = item.stub ? `${item.folded} nodes folded: the least recently used`
        : item.text ?? (item.ids ? item.ids.join(" ") : `node ${item.id}`);
      const parent = item.parent && state.items.get(item.parent);
      if (parent) {
        let path = lines.get(item.key);
        if (!path) {
          path = svgElement("path");
          lines.set(item.key, path);
          edges.append(path);
        }
        path.setAttribute("class", `edge${item.matched ? " matched" : ""}${item.stub ? " stub" : ""}`);
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
    caption.textContent = state.caption;
    program.textContent = state.meta.program ?? "";
    program.hidden = !state.meta.program;
    drawMemory(memory, state.meta);
  }

  const player = createPlayer(el, {
    frame: model.get("frame"),
    onShow: (n) => draw(timeline.stateAt(n)),
    onSettle(n) {
      model.set("frame", n);
      model.save_changes();
    },
  });

  return follow(model, timeline, player, message, error);
}

export default { render };
