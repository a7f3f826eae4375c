// Pure helpers shared by the views: frames, formatting, colouring, geometry. No DOM here, so `node --test`
// checks all of it (tests/js). The Python side decides what the views show; these decide how it reads.

// ---- frames: the format of teachspec/widgets/frames.py -------------------------------------------------------

export function emptyState() {
  return { items: new Map(), meta: {}, caption: "", event: -1 };
}

export function cloneState(state) {
  return { items: new Map(state.items), meta: state.meta, caption: state.caption, event: state.event };
}

// The frames as the widget receives them: the bytes of one UTF-8 JSON array (a DataView from the kernel or a
// saved notebook), or already parsed.
export function decodeFrames(value) {
  if (value === null || value === undefined) return [];
  if (Array.isArray(value)) return value;
  if (typeof value === "string") return JSON.parse(value);
  const bytes = ArrayBuffer.isView(value) ? new Uint8Array(value.buffer, value.byteOffset, value.byteLength)
    : new Uint8Array(value);
  return JSON.parse(new TextDecoder("utf-8").decode(bytes));
}

// The key of the token a frame changed last: the one being decided (a prompt only when nothing else changed).
export function focusOf(frame) {
  if (!frame) return null;
  let prompt = null;
  for (let i = frame.put.length - 1; i >= 0; i--) {
    const kind = frame.put[i].kind;
    if (kind === "prompt") prompt ??= frame.put[i].key;
    else if (kind !== "step") return frame.put[i].key;
  }
  return prompt;
}

// The token in focus at frame n: the one frame n decided, else the newest earlier one still shown. A frame that
// decides nothing (a target pass, a finish) keeps the focus where it was, so the view never loses its place.
export function focusAt(frames, n, items, lookBack = 64) {
  for (let i = n; i >= 0 && i > n - lookBack; i--) {
    const key = focusOf(frames[i]);
    if (key !== null && items.has(key)) return key;
  }
  return null;
}

// The last frame made by event `event` or an earlier one (-1: none yet): where a linked view goes when another
// view of the same log moves to that event. Frames' events only grow, so a binary search finds it.
export function frameAtEvent(frames, event) {
  let lo = 0, hi = frames.length - 1, found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (frames[mid].event <= event) {
      found = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found;
}

// Apply one frame to `state`, in place, and return it: drop, then put, then meta if the frame carries it.
export function applyFrame(state, frame) {
  for (const key of frame.drop) state.items.delete(key);
  for (const item of frame.put) state.items.set(item.key, item);
  if (frame.meta !== undefined) state.meta = frame.meta;
  state.caption = frame.caption;
  state.event = frame.event;
  return state;
}

// The state after frames 0 .. n, for any n, quickly in either direction: it remembers a copy of the state every
// `every` frames, so stepping back replays at most `every` frames instead of all of them.
export class Timeline {
  constructor(frames = [], every = 32) {
    this.every = every;
    this.setFrames(frames);
  }

  // Live views only ever append frames. Every frame names its event, and event indices only grow, so the old
  // last frame reappearing at its place means the old frames are a prefix of the new ones.
  setFrames(frames) {
    const old = this.frames;
    const appended = old && frames.length >= old.length &&
      (old.length === 0 || frames[old.length - 1].event === old[old.length - 1].event);
    if (!appended) {
      this.keyframes = new Map(); // n -> copy of the state after frame n
      this.n = -1;
      this.state = emptyState();
    }
    this.frames = frames;
  }

  // A live view's delta (teachspec/widgets/base.py): frames start, start + 1, ... sent alone. Returns false, and
  // changes nothing, when frames before `start` never arrived; the next full list fills the gap.
  extend(start, frames) {
    if (start > this.frames.length) return false;
    for (const frame of frames.slice(this.frames.length - start)) this.frames.push(frame); // skip any it has
    return true;
  }

  get length() {
    return this.frames.length;
  }

  // The state after frame n (n = -1: before any). Valid until the next call: it is updated in place.
  stateAt(n) {
    n = clamp(n, -1, this.frames.length - 1);
    if (n < this.n) {
      let start = -1;
      for (const k of this.keyframes.keys()) if (k <= n && k > start) start = k;
      this.state = start === -1 ? emptyState() : cloneState(this.keyframes.get(start));
      this.n = start;
    }
    while (this.n < n) {
      this.n += 1;
      applyFrame(this.state, this.frames[this.n]);
      if ((this.n + 1) % this.every === 0) this.keyframes.set(this.n, cloneState(this.state));
    }
    return this.state;
  }
}

// ---- numbers and text ----------------------------------------------------------------------------------------

export function clamp(n, lo, hi) {
  return Math.max(lo, Math.min(hi, n));
}

export function fmt(x, digits = 2) {
  return x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(digits);
}

// Three significant digits, for probabilities that may be tiny: 0.5, 0.0342, 0.000123.
export function sig(x) {
  return x === null || x === undefined || Number.isNaN(x) ? "–" : String(Number(Number(x).toPrecision(3)));
}

export function pct(x) {
  return x === null || x === undefined || Number.isNaN(x) ? "–" : `${Math.round(100 * x)}%`;
}

// A token on its own (a label, a bar): whitespace made visible, an id when there is no text.
export function tokenLabel(text, id) {
  if (text === null || text === undefined) return `#${id}`;
  if (text === "") return "∅";
  return text.replace(/\n/g, "↵").replace(/\t/g, "⇥").replace(/ /g, "␣");
}

// A token inside running text: as it reads, except that a bare id gets a space to stand apart.
export function flowText(text, id) {
  return text === null || text === undefined ? `#${id} ` : text;
}

export function shorten(text, n) {
  return text.length <= n ? text : `${text.slice(0, n - 1)}…`;
}

// A token as a chip in the running text: every character shown, whitespace as a faint glyph (a space "·", a tab
// "⇥", a newline "↵"), and, for each newline, a line break after the chip. Returns { parts, breaks }, each part
// { text, ws }; the chip is never empty, so even a lone space can be seen and clicked.
export function chipParts(text, id) {
  if (text === null || text === undefined) return { parts: [{ text: `#${id}`, ws: false }], breaks: 0 };
  if (text === "") return { parts: [{ text: "∅", ws: true }], breaks: 0 };
  const parts = [];
  let breaks = 0;
  for (const ch of text) {
    const ws = ch === " " || ch === "\n" || ch === "\t" || ch === "\r";
    const shown = ch === " " ? "·" : ch === "\n" ? "↵" : ch === "\t" ? "⇥" : ch === "\r" ? "␍" : ch;
    if (ch === "\n") breaks += 1;
    const last = parts[parts.length - 1];
    if (last && last.ws === ws) last.text += shown;
    else parts.push({ text: shown, ws });
  }
  return { parts, breaks };
}

// A long prompt folded into one chip: "prompt · 133 tokens · …its last line".
export function promptSummary(item, width = 40) {
  const lines = (item.text ?? "").split("\n").map((l) => l.trim()).filter(Boolean);
  let last = lines.length ? lines[lines.length - 1] : (item.ids ?? []).slice(-8).join(" ");
  if (last.length > width) last = `…${last.slice(last.length - width + 1)}`;
  else if (lines.length > 1 || (item.ids && item.n > item.ids.length)) last = `…${last}`;
  return `prompt · ${item.n} token${item.n === 1 ? "" : "s"}${last ? ` · ${last}` : ""}`;
}

// ---- linking views of one log: which tokens a tree node holds ----------------------------------------------

// A tree node holds positions offset .. offset + tokens of each request in its `requests` (radix.py). Does it
// hold the text's `item`: a token at its position, or a prompt (positions 0 .. n) that overlaps it?
export function holds(span, item) {
  if (!span || !item || !span.requests || !span.requests.includes(item.request)) return false;
  const end = span.offset + span.tokens;
  if (item.kind === "prompt") return span.offset < item.n && end > 0;
  return item.position >= span.offset && item.position < end;
}

// ---- the speculation view ------------------------------------------------------------------------------------

// The tokens of one step, in order, grouped: a step is drawn as one bracketed unit.
export function stepKey(item) {
  return `s${item.request}.${item.step}`;
}

// The time lane under the text: each step's draft passes and its one target pass, to scale, beside what plain
// decoding would have spent on the same tokens (one target pass each, as long as this step's). `steps` are the
// step items of one request, in order; returns rows of segments with `start` and `width` as shares of the longer
// row, so both rows share one time axis.
export function laneRows(steps) {
  const spec = [], plain = [];
  let t = 0, u = 0;
  for (const s of steps) {
    const key = `s${s.request}.${s.step}`;
    if (s.draft_ms > 0) {
      spec.push({ key, kind: "draft", start: t, ms: s.draft_ms, k: s.drafted });
      t += s.draft_ms;
    }
    spec.push({ key, kind: "target", start: t, ms: s.verify_ms, n: s.emitted });
    t += s.verify_ms;
    for (let i = 0; i < s.emitted; i++) {
      plain.push({ key, kind: "plain", start: u, ms: s.verify_ms });
      u += s.verify_ms;
    }
  }
  const whole = Math.max(t, u) || 1;
  const scale = (row) => row.map((seg) => ({ ...seg, start: seg.start / whole, width: seg.ms / whole }));
  return { spec: scale(spec), plain: scale(plain), specMs: t, plainMs: u };
}

export const LEGEND = [
  ["drafted", "drafted", "guessed by the draft, not judged yet"],
  ["accepted", "accepted", "kept: u < min(1, p/q)"],
  ["rejected", "rejected", "refused: u ≥ p/q; the rest of the draft is dropped"],
  ["resampled", "resampled", "drawn from the residual norm(max(0, p − q)) instead"],
  ["bonus", "bonus", "all guesses kept: one more token from the same target pass"],
  ["plain", "plain", "plain decoding: one target pass, one token"],
];

export function tokenClass(kind) {
  return kind === "prompt" ? "prompt" : `tok ${kind}`;
}

// Why the token is there, in words and numbers.
export function decision(item) {
  const ratio = item.q > 0 ? item.p / item.q : Infinity;
  const rule = `min(1, p/q) = min(1, ${sig(item.p)}/${sig(item.q)}) = ${sig(Math.min(1, ratio))}`;
  switch (item.kind) {
    case "drafted": return `guessed by the draft with q = ${sig(item.q)}; waiting for the target`;
    case "accepted": return `u = ${sig(item.u)} < ${rule}: accepted`;
    case "rejected": return `u = ${sig(item.u)} ≥ ${rule}: rejected, and replaced by a draw from the residual`;
    case "resampled": return `drawn from the residual norm(max(0, p − q)) where guess ${item.i} was rejected`;
    case "bonus":
      return `every guess was accepted, so p at the next position came free: drawn from it (p = ${sig(item.p)})`;
    case "plain": return `drawn from p (p = ${sig(item.p)}): one target pass for one token`;
    default: return "";
  }
}

// Rows for the bars under a selected token: the top alternatives of p and q side by side (or of the residual
// for a resampled token), the token itself always among them. A probability outside the recorded top is null.
export function alternatives(item) {
  if (item.top_residual) {
    return item.top_residual.map(([token, r, text]) => ({ token, text, r, chosen: token === item.token }));
  }
  const rows = new Map();
  const row = (token, text) => {
    if (!rows.has(token)) rows.set(token, { token, text, p: null, q: null, chosen: token === item.token });
    return rows.get(token);
  };
  for (const [token, p, text] of item.top_p || []) row(token, text).p = p;
  for (const [token, q, text] of item.top_q || []) row(token, text).q = q;
  if (item.token !== undefined) {
    const own = row(item.token, item.text);
    if (item.p !== undefined) own.p = item.p;
    if (item.q !== undefined && item.kind !== "bonus" && item.kind !== "plain") own.q = item.q;
  }
  return [...rows.values()].sort((a, b) => (b.p ?? -1) - (a.p ?? -1) || (b.q ?? -1) - (a.q ?? -1));
}

// The largest probability among the rows: bars are drawn relative to it, so that small probabilities (a random
// or an uncertain model) still show, while the numbers beside the bars stay absolute.
export function barScale(rows) {
  let top = 0;
  for (const row of rows) for (const v of [row.p, row.q, row.r]) if (v != null && v > top) top = v;
  return top > 0 ? top : 1;
}

// The stats strip: [label, value, what it means].
export function statsStrip(meta) {
  return [
    ["α", fmt(meta.alpha), `accepted / judged guesses (${meta.accepted ?? 0} / ${meta.judged ?? 0})`],
    ["tokens / pass", fmt(meta.tokens_per_pass), `${meta.emitted ?? 0} tokens from ${meta.passes ?? 0} target passes`],
    ["k", fmt(meta.k, 1), "mean draft length"],
    ["c", fmt(meta.c, 3), "draft time per token / target time per pass"],
    ["speedup predicted", meta.predicted == null ? "–" : `${fmt(meta.predicted)}×`,
      "theory.speedup(α, k, c): (1 − α^(k+1)) / ((1 − α)(k c + 1))"],
    ["measured", meta.measured == null ? "–" : `${fmt(meta.measured)}×`,
      "tokens × mean target pass time / time spent drafting and verifying"],
  ];
}

// ---- the radix tree view -------------------------------------------------------------------------------------

// The tree's geometry at scale 1, in px. Its labels are 15 px (`chars` monospace characters a line fill a box), so
// a fit that scales the drawing down to TREE.minScale keeps them at 14 px or more. Narrow boxes keep a tree of 6
// leaves inside a notebook's output at 1280 x 720 beside JupyterLab's file browser, and 3 inside half of it
// (teachspec/widgets/radix.py folds wider trees); a box narrower still pans to the nodes the caption names.
export const TREE = { column: 138, row: 92, width: 128, height: 72, pad: 8, chars: 12, minScale: 14 / 15 };

// The scale that fits `natural` px into `available` px: never below minScale (the text stays readable), never
// above 1.25 (a small tree does not balloon).
export function fitScale(natural, available) {
  if (!(natural > 0) || !(available > 0)) return 1;
  return clamp(available / natural, TREE.minScale, 1.25);
}

// The box around the nodes `keys` names (the caption's nodes, radix.py's meta.focus) at scale 1, or null when none
// of them is drawn.
export function focusBox(keys, items) {
  const spots = (keys ?? []).filter((key) => items.has(key)).map((key) => nodeSpot(items.get(key)));
  if (!spots.length) return null;
  const xs = spots.map((s) => s.x), ys = spots.map((s) => s.y);
  return { left: Math.min(...xs), top: Math.min(...ys), right: Math.max(...xs) + TREE.width,
    bottom: Math.max(...ys) + TREE.height };
}

// Where a box that shows `size` px of its content from `scroll` on should scroll to so that [lo, hi] lies inside
// it: where it is if it does already, else centred on [lo, hi] (a tree's box follows the caption's nodes).
export function scrollToShow(lo, hi, scroll, size, margin = 6) {
  if (lo >= scroll + margin && hi <= scroll + size - margin) return scroll;
  return Math.max(0, (lo + hi) / 2 - size / 2);
}

export function nodeSpot(item) {
  return { x: TREE.pad + item.x * TREE.column, y: TREE.pad + item.y * TREE.row };
}

export function treeSize(items) {
  let x = 0, y = 0;
  for (const item of items) {
    x = Math.max(x, item.x);
    y = Math.max(y, item.y);
  }
  return { width: 2 * TREE.pad + x * TREE.column + TREE.width, height: 2 * TREE.pad + y * TREE.row + TREE.height };
}

// From the bottom middle of the parent's box to the top middle of the child's.
export function edgePath(parent, child) {
  const a = nodeSpot(parent), b = nodeSpot(child);
  const x1 = a.x + TREE.width / 2, y1 = a.y + TREE.height, x2 = b.x + TREE.width / 2, y2 = b.y;
  const ym = (y1 + y2) / 2;
  return `M ${x1} ${y1} C ${x1} ${ym}, ${x2} ${ym}, ${x2} ${y2}`;
}

// A node's label as up to `rows` lines of at most `width` characters, then its id and size (its locks are a badge
// of their own, radix.js: the words would not fit the box): the text wraps at spaces where it can, and what does
// not fit ends in "…".
export function nodeLabel(item, width = TREE.chars, rows = 2) {
  const [head, tail] = nodeLines({ ...item, locks: 0 }, Infinity);
  if (item.stub || item.parent === null) return { lines: [head], tail };
  const lines = [];
  let rest = head;
  while (rest && lines.length < rows) {
    if (rest.length <= width) {
      lines.push(rest);
      rest = "";
      break;
    }
    let cut = rest.lastIndexOf("␣", width);
    cut = cut > width / 2 ? cut + 1 : width;
    lines.push(rest.slice(0, cut));
    rest = rest.slice(cut);
  }
  if (rest) lines[lines.length - 1] = shorten(`${lines[lines.length - 1]}${rest}`, width);
  return { lines, tail };
}

// A node's two lines, the same as teachspec/widgets/svg.py's `label`.
export function nodeLines(item, width = 16) {
  if (item.stub) return [`+${item.folded} nodes`, `${item.tokens} tok folded`];
  if (item.parent === null) return ["root", ""];
  const head = item.text != null ? tokenLabel(item.text, item.id) : item.ids ? item.ids.join(" ") : "";
  const locks = item.locks ? ` · ${item.locks} lock${item.locks === 1 ? "" : "s"}` : "";
  if (!head) return [`#${item.id}`, `${item.tokens} tok${locks}`]; // nothing but the id: it heads the box alone
  return [shorten(head, width), `#${item.id} · ${item.tokens} tok${locks}`];
}

// What every colour and mark of the tree means (each legend entry carries data-legend=its key).
export const TREE_LEGEND = [
  ["matched", "matched", "on the path the last lookup matched: these tokens were reused"],
  ["proposed", "proposed", "a suffix tree's guess: the branch below the match it proposes to the target"],
  ["new", "new", "inserted by the last event"],
  ["split", "split", "cut in two by the last event: the new node above holds the first part"],
  ["locked", "in use", "locked by a running request: protected from eviction"],
  ["evicted", "evicted", "dropped to free memory (least recently used first)"],
  ["stub", "+N folded", "nodes not drawn, to keep the tree readable"],
];

export function nodeClass(item) {
  const parts = ["ts-node"];
  if (item.stub) parts.push("stub");
  if (item.parent === null && !item.stub) parts.push("root");
  if (item.mark) parts.push(item.mark);
  if (item.matched) parts.push("matched");
  if (item.proposed) parts.push("proposed");
  if (item.locks) parts.push("locked");
  return parts.join(" ");
}

// The memory bar: in use (locked), cached (evictable), free, as shares of the budget (of the cache without one).
export function memorySegments(meta) {
  const inUse = meta.in_use ?? 0, cached = meta.cached ?? 0;
  const whole = meta.budget != null ? Math.max(meta.budget, inUse + cached) : inUse + cached;
  const share = (n) => (whole > 0 ? n / whole : 0);
  const segments = [
    { name: "in use (locked)", cls: "in-use", tokens: inUse, share: share(inUse) },
    { name: "cached", cls: "cached", tokens: cached, share: share(cached) },
  ];
  if (meta.budget != null) {
    const free = Math.max(0, meta.budget - inUse - cached);
    segments.push({ name: "free", cls: "free", tokens: free, share: share(free) });
  }
  return segments;
}

// ---- playing -------------------------------------------------------------------------------------------------

export const SPEEDS = [0.25, 0.5, 1, 2, 4, 8];

// Milliseconds between frames at `speed`; a live view that has fallen `behind` catches up within ~0.4 s.
export function stepDelay(speed, behind = 0) {
  const base = 500 / speed;
  return behind > 1 ? Math.max(16, Math.min(base, 400 / behind)) : base;
}
