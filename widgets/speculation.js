// SpeculationView's drawing: the growing text, a legend, the stats strip, the time lane, and the selected token's
// p and q. Python (teachspec/widgets/speculation.py) decides every token's kind and numbers; this only draws them.
//
// Every token is a chip (whitespace shown as faint glyphs, so a rejected space or newline can be seen and
// clicked), the chips of one step sit in one bracket, and a long prompt folds into one chip that opens on click.
// The text box scrolls so the token being decided stays in view. DOM hooks for tests and for linked views: each
// chip has data-token-index (its place in the text) and data-key, the focused one data-focus, one held by a
// hovered tree node data-highlight; each step bracket data-step; each legend entry data-legend.
//
// A tree step (`tree=`) brings only what it emitted into the text: its accepted path and its resampled or bonus
// token, each carrying the `node` of the tree it came from. Where the rule refused children, one rejected mark
// stands at that position (an item with `siblings`): each refused token once, struck through, never a line break;
// its detail lists every sibling tried there with p', q' and u.
import {
  LEGEND, Timeline, alternatives, barScale, chipParts, decision, decodeFrames, fmt, focusAt, holds, laneRows,
  promptSummary, sig, statsStrip, stepKey, tokenClass, tokenLabel,
} from "./helpers.js";
import { HOLD, announce, createPlayer, follow } from "./player.js";

function div(cls, parent) {
  const d = document.createElement("div");
  d.className = cls;
  parent.append(d);
  return d;
}

// ---- a tree step's tokens: pure, for `node --test` (tests/js/speculation.test.mjs) -----------------------------

// The tokens of a rejected mark, each once, in the order tried: siblings drawn independently may hold the same one.
export function refusedTokens(item) {
  const seen = new Map();
  for (const s of item.siblings ?? []) if (!seen.has(s.token)) seen.set(s.token, { token: s.token, text: s.text });
  return [...seen.values()];
}

function rule(item) {
  const ratio = item.q > 0 ? item.p / item.q : Infinity;
  return `min(1, p/q) = min(1, ${sig(item.p)}/${sig(item.q)}) = ${sig(Math.min(1, ratio))}`;
}

const said = (s) => `node ${s.node} ${JSON.stringify(s.text ?? `#${s.token}`)}`;

// Why a token is there: the tree's own words for a tree step's tokens (they carry `node` or `siblings`), helpers.js
// `decision` for every other.
export function explain(item) {
  if (item.siblings) {
    const each = item.siblings.map((s) => `${said(s)} (u = ${sig(s.u)} ≥ ${rule(s)})`).join("; ");
    return `refused here: ${each}. Each sibling after the first is judged against the residual the ones before ` +
      "it left";
  }
  if (item.node === undefined) return decision(item);
  switch (item.kind) {
    case "accepted": return `node ${item.node} of the tree: u = ${sig(item.u)} < ${rule(item)}: accepted, and ` +
      "the rule moves down to it";
    case "resampled": return `every child of node ${item.node} was refused: drawn from the last residual ` +
      "norm(max(0, p − q))";
    case "bonus": return `the accepted path ended at node ${item.node}, a leaf of the tree: p after it came free, ` +
      `and this token was drawn from it (p = ${sig(item.p)})`;
    default: return decision(item);
  }
}

// Where the token sits, for the detail's head: its position, and its guess in a chain or its node in a tree.
export function place(item) {
  const from = item.siblings ? `, ${item.siblings.length} sibling${item.siblings.length === 1 ? "" : "s"} refused`
    : item.node !== undefined ? `, node ${item.node} of the tree` : item.i !== undefined ? `, guess ${item.i}` : "";
  return `${item.kind}, position ${item.position}${from}`;
}

// The rows of the bars under a selected token: each refused sibling with its own p and q for a rejected mark,
// helpers.js `alternatives` for every other token.
export function detailRows(item) {
  if (!item.siblings) return alternatives(item);
  return item.siblings.map((s) => ({ token: s.token, text: s.text, p: s.p, q: s.q, chosen: false }));
}

// The line under a selected token's bars, which must be true of the engine that made it: a guess not judged yet
// has no p, and so no alternatives, whatever the engine records; a judged token without them comes from an engine
// that recorded none (record_top=0), since one that records them does so at every judged position.
export function note(item) {
  if (item.siblings || item.node !== undefined) {
    return "A tree step records no alternatives; TokenTreeView shows the whole tree of guesses.";
  }
  if (item.kind === "drafted") return "Waiting for the target pass: p and the alternatives come with the verdict.";
  if (item.top_p || item.top_q || item.top_residual) return "";
  return "The engine recorded no alternatives: build it with record_top=5 to see them.";
}

// A step's words: "6 guesses" for a chain, "a tree of 6 guesses" for a tree.
export function guesses(step) {
  return `${step.tree ? "a tree of " : ""}${step.drafted} guess${step.drafted === 1 ? "" : "es"}`;
}

// ---- drawing ---------------------------------------------------------------------------------------------------

function legend(parent) {
  const box = div("ts-legend", parent);
  for (const [kind, label, meaning] of LEGEND) {
    const chip = document.createElement("span");
    chip.className = tokenClass(kind);
    chip.dataset.legend = kind;
    chip.textContent = label;
    chip.title = meaning;
    box.append(chip);
  }
  const unit = document.createElement("span");
  unit.className = "ts-unit spec ts-legend-unit";
  unit.dataset.legend = "step";
  unit.textContent = "one step";
  unit.title = "the tokens of one step: the draft's guesses, judged by one target pass";
  box.append(unit);
}

function drawStats(box, meta) {
  box.replaceChildren(...statsStrip(meta).map(([label, value, meaning]) => {
    const cell = document.createElement("span");
    cell.className = "ts-stat";
    cell.title = meaning;
    cell.innerHTML = "<b></b> <span></span>";
    cell.firstChild.textContent = label;
    cell.lastChild.textContent = value;
    return cell;
  }));
}

function bar(value, cls, scale) {
  const cell = document.createElement("td");
  cell.className = "ts-barcell";
  const fill = document.createElement("div");
  fill.className = `ts-bar ${cls}`;
  fill.style.width = `${value == null ? 0 : Math.round((100 * value) / scale)}%`;
  const number = document.createElement("span");
  number.textContent = value == null ? "not in top" : sig(value);
  cell.append(fill, number);
  return cell;
}

function drawDetail(box, item) {
  if (!item || item.kind === "prompt") {
    box.replaceChildren();
    box.textContent = "Click a token to see p and q, the uniform u and the decision.";
    return;
  }
  const head = document.createElement("div");
  head.className = "ts-detail-head";
  const chip = document.createElement("span");
  chip.className = tokenClass(item.kind);
  chip.textContent = item.siblings ? refusedTokens(item).map((t) => tokenLabel(t.text, t.token)).join(" | ")
    : tokenLabel(item.text, item.token);
  head.append(chip, ` ${place(item)}`);
  const why = document.createElement("div");
  why.className = "ts-decision";
  why.textContent = explain(item);
  const rows = detailRows(item);
  const scale = barScale(rows);
  const table = document.createElement("table");
  table.className = "ts-alternatives";
  const residual = Boolean(item.top_residual);
  table.innerHTML = residual ? "<tr><th>token</th><th>residual</th></tr>"
    : "<tr><th>token</th><th>p (target)</th><th>q (draft)</th></tr>";
  for (const row of rows) {
    const tr = document.createElement("tr");
    if (row.chosen) tr.className = "chosen";
    const name = document.createElement("td");
    name.textContent = tokenLabel(row.text, row.token);
    tr.append(name);
    if (residual) tr.append(bar(row.r, "r", scale));
    else tr.append(bar(row.p, "p", scale), bar(row.q, "q", scale));
    table.append(tr);
  }
  const words = document.createElement("div");
  words.className = "ts-note";
  words.textContent = note(item);
  box.replaceChildren(head, why, table, words);
}

// The chip's content: characters as they are, whitespace as faint glyphs (helpers.js chipParts); a rejected mark's
// tokens one after another, split by a faint bar.
function fillChip(chip, item) {
  const tokens = item.siblings ? refusedTokens(item) : [item];
  const nodes = [];
  tokens.forEach(({ text, token }, n) => {
    if (n) nodes.push(Object.assign(document.createElement("span"), { className: "ws", textContent: " | " }));
    for (const part of chipParts(text, token).parts) {
      if (!part.ws) nodes.push(document.createTextNode(part.text));
      else nodes.push(Object.assign(document.createElement("span"), { className: "ws", textContent: part.text }));
    }
  });
  chip.replaceChildren(...nodes);
}

// The lane: the steps of the focused token's request, each draft and target pass to scale, over what plain
// decoding would have spent on the same tokens.
function drawLane(box, steps, current) {
  if (!steps.length) {
    box.replaceChildren();
    return;
  }
  const rows = laneRows(steps);
  const byKey = new Map(steps.map((s) => [stepKey(s), s]));
  const row = (name, segments, ms, meaning) => {
    const line = document.createElement("div");
    line.className = "ts-lane-row";
    line.title = meaning;
    const label = document.createElement("span");
    label.className = "ts-lane-label";
    label.textContent = name;
    const track = document.createElement("div");
    track.className = "ts-lane-track";
    for (const seg of segments) {
      const bar = document.createElement("div");
      bar.className = `ts-seg ${seg.kind}${seg.key === current ? " current" : ""}`;
      bar.dataset.laneStep = seg.key;
      bar.style.left = `${(100 * seg.start).toFixed(3)}%`;
      bar.style.width = `${(100 * seg.width).toFixed(3)}%`;
      bar.title = seg.kind === "draft" ? `draft: ${guesses(byKey.get(seg.key))}, ${fmt(seg.ms)} ms`
        : seg.kind === "target" ? `one target pass: ${seg.n} token${seg.n === 1 ? "" : "s"}, ${fmt(seg.ms)} ms`
          : `plain decoding: one target pass per token, ${fmt(seg.ms)} ms`;
      track.append(bar);
    }
    const total = document.createElement("span");
    total.className = "ts-lane-total";
    total.textContent = `${fmt(ms, 1)} ms`;
    line.append(label, track, total);
    return line;
  };
  const step = steps.find((s) => stepKey(s) === current);
  const words = document.createElement("div");
  words.className = "ts-lane-words";
  words.textContent = !step ? ""
    : !step.verify_ms ? `this step: ${guesses(step)} (${fmt(step.draft_ms)} ms), waiting for the target pass`
    : step.drafted ? `this step: ${guesses(step)} (${fmt(step.draft_ms)} ms), one target pass ` +
      `(${fmt(step.verify_ms)} ms) → ${step.emitted} token${step.emitted === 1 ? "" : "s"}; plain decoding: ` +
      `${step.emitted} target pass${step.emitted === 1 ? "" : "es"}`
      : `this step: plain decoding, one target pass (${fmt(step.verify_ms)} ms) → one token`;
  box.replaceChildren(
    row("speculative", rows.spec, rows.specMs, "draft passes (violet) and one target pass (blue) per step"),
    row("plain", rows.plain, rows.plainMs, "plain decoding: one target pass (grey) per token"),
    words);
}

// Scroll `box` (only it, never the page) so that `chip` lies inside it, centred when it had left the view. A box
// not laid out yet (a notebook drawing the output offscreen) is left alone: its ResizeObserver calls again.
function keepInView(box, chip) {
  if (!chip || !box.clientHeight) return;
  const outer = box.getBoundingClientRect(), inner = chip.getBoundingClientRect();
  const margin = 6;
  if (inner.top >= outer.top + margin && inner.bottom <= outer.bottom - margin) return;
  box.scrollTop += inner.top - outer.top - (box.clientHeight - inner.height) / 2;
}

function render({ model, el }) {
  el.classList.add("ts-view", "ts-spec");
  el.dataset.link = model.get("link") ?? "";
  legend(el);
  const stats = div("ts-stats", el); // the player goes in front of it: under the legend, always on screen
  const caption = div("ts-caption", el);
  const text = div("ts-text", el);
  const lane = div("ts-lane", el);
  const detail = div("ts-detail", el);
  const message = div("ts-empty", el);
  const error = div("ts-error", el);
  const link = model.get("link") ?? "";
  const timeline = new Timeline(decodeFrames(model.get("frames_json")));
  const chips = new Map(); // item key -> its chip, reused so CSS transitions show each change
  const units = new Map(); // step key -> its bracket
  const opened = new Set(); // prompts the user unfolded
  let state = null, focus = null, selected = null, span = null; // span: the hovered tree node's tokens

  function chipFor(item) {
    let chip = chips.get(item.key);
    if (!chip) {
      chip = document.createElement("span");
      chip.dataset.key = item.key;
      chips.set(item.key, chip);
    }
    const label = item.kind === "prompt" ? `${promptSummary(item)}${opened.has(item.key) ? " ▾" : " ▸"}`
      : (item.siblings ? refusedTokens(item) : [item]).map((t) => `${t.text ?? ""}\u0000${t.token}`).join("\u0000");
    if (chip.dataset.label !== label) {
      chip.dataset.label = label;
      if (item.kind === "prompt") chip.textContent = label;
      else fillChip(chip, item);
    }
    return chip;
  }

  function draw() {
    const items = [...state.items.values()].filter((i) => i.kind !== "step").sort((a, b) => a.order - b.order);
    const out = [], members = new Map();
    let index = 0;
    for (const item of items) {
      const chip = chipFor(item);
      chip.className = item.kind === "prompt" ? "tok prompt-chip" : tokenClass(item.kind);
      chip.dataset.tokenIndex = String(index++);
      chip.toggleAttribute("data-focus", item.key === focus);
      chip.toggleAttribute("data-highlight", holds(span, item));
      chip.classList.toggle("selected", item.key === selected);
      if (item.kind === "prompt") {
        chip.title = `the prompt of request ${item.request}: ${item.n} tokens (click to ${opened.has(item.key)
          ? "fold" : "show"} it)`;
        if (out.length) out.push(Object.assign(document.createElement("div"), { className: "ts-request-break" }));
        out.push(chip);
        if (opened.has(item.key)) {
          const full = document.createElement("div");
          full.className = "ts-prompt-full";
          full.textContent = item.text ?? `${item.ids.join(" ")}${item.n > item.ids.length ? " …" : ""}`;
          out.push(full);
        }
        continue;
      }
      chip.title = explain(item);
      const key = stepKey(item);
      if (!members.has(key)) {
        let unit = units.get(key);
        if (!unit) {
          unit = document.createElement("span");
          unit.dataset.step = key;
          units.set(key, unit);
        }
        members.set(key, []);
        out.push(unit);
      }
      members.get(key).push(chip);
      const { breaks } = item.siblings ? { breaks: 0 } : chipParts(item.text, item.token); // a mark breaks no line
      for (let b = 0; b < breaks; b++) members.get(key).push(document.createElement("br"));
    }
    const steps = new Map([...state.items.values()].filter((i) => i.kind === "step").map((s) => [stepKey(s), s]));
    for (const [key, unit] of units) {
      if (!members.has(key)) {
        units.delete(key);
        continue;
      }
      const step = steps.get(key);
      unit.className = `ts-unit${step?.drafted ? " spec" : " plain"}`;
      unit.title = step?.drafted ? `step ${step.step}: ${guesses(step)}, one target pass, ${step.emitted} ` +
        `tokens kept` : "plain decoding: one target pass, one token";
      unit.replaceChildren(...members.get(key));
    }
    for (const key of chips.keys()) if (!state.items.has(key)) chips.delete(key);
    text.replaceChildren(...out);

    const focused = state.items.get(focus);
    const current = focused && focused.kind !== "prompt" ? stepKey(focused) : null;
    const request = focused?.request;
    drawLane(lane, [...steps.values()].filter((s) => s.request === request), current);
    drawStats(stats, state.meta);
    caption.textContent = state.caption;
    drawDetail(detail, state.items.get(selected) ?? focused);
    keepInView(text, chips.get(selected) ?? chips.get(focus));
  }

  const player = createPlayer(el, {
    frame: model.get("frame"),
    link,
    timeline,
    before: stats,
    onShow(n) {
      state = timeline.stateAt(n);
      focus = focusAt(timeline.frames, n, state.items);
      draw();
    },
    onSettle(n) {
      model.set("frame", n);
      model.save_changes();
    },
  });

  const itemOf = (target) => state?.items.get(target.closest?.("[data-key]")?.dataset.key);
  text.addEventListener("click", (e) => {
    const item = itemOf(e.target);
    if (!item) return;
    if (item.kind === "prompt") {
      if (opened.has(item.key)) opened.delete(item.key);
      else opened.add(item.key);
    } else selected = selected === item.key ? null : item.key;
    draw();
  });
  // a token points at the tree node that holds it (radix.js), for as long as the pointer is on it
  text.addEventListener("mouseover", (e) => {
    const item = itemOf(e.target);
    if (item) announce(HOLD, { link, from: "text", token: { request: item.request, position: item.position ?? 0 } });
  });
  text.addEventListener("mouseleave", () => announce(HOLD, { link, from: "text", token: null }));
  // a tree node marks the tokens it holds
  const onHold = (e) => {
    if (e.detail.link !== link || e.detail.from === "text" || !state) return;
    span = e.detail.span;
    draw();
    const first = text.querySelector("[data-highlight]");
    if (first && !selected) keepInView(text, first);
  };
  if (link) document.addEventListener(HOLD, onHold);
  // the text box gets its size (a cell scrolled into view, a window resized): the focus back into it
  const resize = typeof ResizeObserver === "undefined" ? null
    : new ResizeObserver(() => state && keepInView(text, chips.get(selected) ?? chips.get(focus)));
  resize?.observe(text);

  const stop = follow(model, timeline, player, message, error);
  return () => {
    document.removeEventListener(HOLD, onHold);
    resize?.disconnect();
    stop();
  };
}

export default { render };
