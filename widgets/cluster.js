// ClusterView's routes (teachspec/widgets/cluster.py, RouteView): one column per replica, its readout on top (hit
// rate, requests, evictions; "down" once it died, the column greyed), and under it the requests the router sent
// there, newest first, each a chip coloured by its session key with the share of its prompt found cached. The
// replicas' trees below it are RadixTreeViews of the same log: one timeline moves them all (player.js).
// DOM hooks: each column data-replica and data-state, each chip data-request.
import { Timeline, decodeFrames } from "./helpers.js";
import { createPlayer, follow } from "./player.js";

// The state's items as columns: [{ replica, head, routes (newest first) }], one per replica of meta.replicas.
export function routeColumns(items, replicas) {
  const columns = Array.from({ length: replicas }, (_, replica) => ({ replica, head: null, routes: [] }));
  for (const item of items.values()) {
    const column = columns[item.replica];
    if (!column) continue;
    if (item.kind === "replica") column.head = item;
    else column.routes.push(item);
  }
  for (const column of columns) column.routes.sort((a, b) => b.order - a.order);
  return columns;
}

// A route's words: "#12 tenant-3 · 62% cached".
export function routeLabel(route) {
  const hit = route.hit == null ? "" : ` · ${Math.round(100 * route.hit)}% cached`;
  return `#${route.request}${route.tenant ? ` ${route.tenant}` : ""}${hit}`;
}

function div(cls, text = "") {
  const e = document.createElement("div");
  e.className = cls;
  e.textContent = text;
  return e;
}

function drawColumn({ replica, head, routes }) {
  const state = head?.state ?? "up";
  const box = div(`ts-replica ${state}`);
  box.dataset.replica = String(replica);
  box.dataset.state = state;
  const title = div("ts-replica-title", `replica ${replica}`);
  if (state === "down") title.append(div("ts-down", "down"));
  box.append(title, div("ts-replica-words", head?.words ?? "nothing routed yet"));
  for (const route of routes) {
    const chip = div("ts-route", routeLabel(route));
    chip.dataset.request = String(route.request);
    chip.style.borderColor = route.color;
    chip.style.setProperty("--ts-route", route.color);
    chip.title = `request ${route.request} → replica ${route.replica}: ${route.tokens} prompt tokens` +
      (route.hit == null ? "" : `, ${Math.round(100 * route.hit)}% of them cached there`);
    box.append(chip);
  }
  return box;
}

function render({ model, el }) {
  el.classList.add("ts-view", "ts-cluster");
  const link = model.get("link") ?? "";
  el.dataset.link = link;
  const keys = div("ts-legend ts-route-keys");
  const caption = div("ts-caption");
  const grid = div("ts-cluster-grid");
  const message = div("ts-empty");
  const error = div("ts-error");
  el.append(keys, caption, grid, message, error);

  const timeline = new Timeline(decodeFrames(model.get("frames_json")));
  let state = null;

  function draw() {
    const replicas = state.meta.replicas ?? 0;
    grid.style.gridTemplateColumns = `repeat(${Math.max(replicas, 1)}, minmax(0, 1fr))`;
    grid.replaceChildren(...routeColumns(state.items, replicas).map(drawColumn));
    keys.replaceChildren(...(state.meta.keys ?? []).map(([key, color]) => {
      const entry = div("ts-key", key);
      entry.style.setProperty("--ts-route", color);
      return entry;
    }));
    if (state.meta.policy) keys.prepend(div("ts-policy", `policy: ${state.meta.policy}`));
    caption.textContent = state.caption;
  }

  const player = createPlayer(el, {
    frame: model.get("frame"),
    link,
    timeline,
    before: caption,
    onShow: (n) => {
      state = timeline.stateAt(n);
      draw();
    },
    onSettle(n) {
      model.set("frame", n);
      model.save_changes();
    },
  });
  const stop = follow(model, timeline, player, message, error);
  return () => stop();
}

export default { render };
