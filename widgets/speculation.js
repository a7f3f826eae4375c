// SpeculationView's drawing: the growing text, a legend, the stats strip, and the selected token's p and q.
// Python (teachspec/widgets/speculation.py) decides every token's kind and numbers; this only draws them.
import {
  LEGEND, Timeline, alternatives, barScale, decision, decodeFrames, flowText, focusOf, sig, statsStrip, tokenClass,
  tokenLabel,
} from "./helpers.js";
import { createPlayer, follow } from "./player.js";

function div(cls, parent) {
  const d = document.createElement("div");
  d.className = cls;
  parent.append(d);
  return d;
}

function legend(parent) {
  const box = div("ts-legend", parent);
  for (const [kind, label, meaning] of LEGEND) {
    const chip = document.createElement("span");
    chip.className = tokenClass(kind);
    chip.textContent = label;
    chip.title = meaning;
    box.append(chip);
  }
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
  chip.textContent = tokenLabel(item.text, item.token);
  head.append(chip, ` ${item.kind}, position ${item.position}${item.i !== undefined ? `, guess ${item.i}` : ""}`);
  const why = document.createElement("div");
  why.className = "ts-decision";
  why.textContent = decision(item);
  const rows = alternatives(item);
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
  const note = document.createElement("div");
  note.className = "ts-note";
  note.textContent = rows.length > 1 ? ""
    : "The engine recorded no alternatives: run it with record_top=5 to see them.";
  box.replaceChildren(head, why, table, note);
}

function render({ model, el }) {
  el.classList.add("ts-view", "ts-spec");
  legend(el);
  const stats = div("ts-stats", el);
  const caption = div("ts-caption", el);
  const text = div("ts-text", el);
  const detail = div("ts-detail", el);
  const message = div("ts-empty", el);
  const error = div("ts-error", el);
  const timeline = new Timeline(decodeFrames(model.get("frames_json")));
  const spans = new Map(); // item key -> its <span>, reused so CSS transitions show each change
  let state = null, focus = null, selected = null;

  function draw() {
    const items = [...state.items.values()].sort((a, b) => a.order - b.order);
    let previous = null;
    for (const item of items) {
      let span = spans.get(item.key);
      if (!span) {
        span = document.createElement("span");
        span.dataset.key = item.key;
        spans.set(item.key, span);
      }
      const requestBreak = item.kind === "prompt" && previous !== null;
      span.className = tokenClass(item.kind) + (requestBreak ? " new-request" : "") +
        (item.key === focus ? " focus" : "") + (item.key === selected ? " selected" : "");
      span.textContent = item.kind === "prompt"
        ? item.text ?? `⟨${item.ids.join(" ")}${item.n > item.ids.length ? " …" : ""}⟩ `
        : flowText(item.text, item.token);
      span.title = item.kind === "prompt" ? `prompt of request ${item.request}: ${item.n} tokens` : decision(item);
      if (span.previousSibling !== previous || span.parentNode !== text) {
        text.insertBefore(span, previous ? previous.nextSibling : text.firstChild);
      }
      previous = span;
    }
    for (const [key, span] of spans) {
      if (!state.items.has(key)) {
        span.remove();
        spans.delete(key);
      }
    }
    drawStats(stats, state.meta);
    caption.textContent = state.caption;
    drawDetail(detail, state.items.get(selected) ?? state.items.get(focus));
  }

  const player = createPlayer(el, {
    frame: model.get("frame"),
    onShow(n) {
      state = timeline.stateAt(n);
      focus = focusOf(timeline.frames[n]);
      draw();
    },
    onSettle(n) {
      model.set("frame", n);
      model.save_changes();
    },
  });

  text.addEventListener("click", (e) => {
    const key = e.target.dataset?.key;
    if (!key) return;
    selected = selected === key ? null : key;
    draw();
  });

  return follow(model, timeline, player, message, error);
}

export default { render };
