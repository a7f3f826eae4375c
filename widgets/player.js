// The step-through controls every view shares: play / pause, one step back or forward, a slider, a speed.
// They run in the browser alone, so a replay works with no kernel (an HTML export, Voila, a closed kernel).
//
// Views of one log share a `link` (teachspec/widgets/base.py), and one timeline drives them all: whenever the
// user moves a player (a step, the slider, a key, play), it announces the event it shows on the page, and every
// other player with the same link moves to its own last frame at or before that event. Each view's element
// carries data-event, the event the page's timeline is at, so a test can see that they agree.
import { SPEEDS, clamp, decodeFrames, frameAtEvent, stepDelay } from "./helpers.js";

export const SEEK = "teachspec:seek"; // a document event: { link, event, from }
export const HOLD = "teachspec:hold"; // a document event: { link, from, span } or { link, from, token }

// Tell the other views of `link` something (see SEEK and HOLD); a page with no other view hears nothing.
export function announce(type, detail) {
  if (detail.link) document.dispatchEvent(new CustomEvent(type, { detail }));
}

function button(label, cls, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = `ts-btn ${cls}`;
  b.textContent = label;
  b.title = title;
  return b;
}

// `onShow(n)` draws frame n; `onSettle(n)` hears where the user left the player (to save it with the widget).
// `frame` is where to open: -1 means the newest frame, and then the player *follows*: frames that arrive later
// (a live view) are played through as they come, until the user steps, drags or presses play. The controls go in
// front of `before` (the views put them under their legend, so a tall view keeps them on screen), or at the end.
export function createPlayer(container, {
  onShow, onSettle = () => {}, frame = -1, link = "", timeline = null, before = null,
}) {
  // who announced: random, since each view on an exported page carries its own copy of this module
  const me = `p${Math.random().toString(36).slice(2)}`;
  const bar = document.createElement("div");
  bar.className = "ts-player";
  const back = button("◀", "ts-back", "one frame back (←)");
  const play = button("▶", "ts-play", "play / pause (space)");
  const forward = button("▶|", "ts-forward", "one frame forward (→)");
  const slider = document.createElement("input");
  slider.type = "range";
  slider.className = "ts-slider";
  slider.min = "0";
  const counter = document.createElement("span");
  counter.className = "ts-counter";
  const speed = document.createElement("select");
  speed.className = "ts-speed";
  speed.title = "playback speed";
  for (const s of SPEEDS) speed.add(new Option(`${s}×`, String(s), s === 1, s === 1));
  bar.append(back, play, forward, slider, counter, speed);
  container.insertBefore(bar, before); // `before` null: at the end

  let count = 0, shown = -1, playing = false, timer = null, follow = frame === -1;
  const eventOf = (n) => (timeline && n >= 0 ? timeline.frames[n]?.event ?? -1 : -1);

  // `user`: the user moved this player, so the other views of its log follow it to the same event.
  function show(n, user = false) {
    shown = clamp(n, count ? 0 : -1, count - 1);
    draw(eventOf(shown));
    if (user) announce(SEEK, { link, event: eventOf(shown), from: me });
  }

  function draw(event) {
    slider.value = String(Math.max(shown, 0));
    counter.textContent = `${shown + 1} / ${count}`;
    container.dataset.event = String(event);
    container.dataset.frame = String(shown);
    onShow(shown);
  }

  // Another view of the same log moved to `event`: show the last frame at or before it (none: the empty state).
  function seek(e) {
    const { detail } = e;
    if (!link || detail.link !== link || detail.from === me || !timeline) return;
    follow = false;
    setPlaying(false);
    shown = Math.min(frameAtEvent(timeline.frames, detail.event), count - 1);
    draw(detail.event);
  }
  document.addEventListener(SEEK, seek);

  function setPlaying(on) {
    playing = on;
    clearTimeout(timer);
    play.textContent = on ? "❚❚" : "▶";
    bar.classList.toggle("playing", on);
  }

  function tick() {
    if (shown >= count - 1) {
      setPlaying(false);
      if (!follow) onSettle(shown);
      return;
    }
    show(shown + 1, !follow);
    timer = setTimeout(tick, stepDelay(Number(speed.value), follow ? count - 1 - shown : 0));
  }

  function toggle() {
    if (playing) {
      setPlaying(false);
      follow = false;
      onSettle(shown);
      return;
    }
    if (!count) return;
    follow = false;
    if (shown >= count - 1) show(0, true); // from the top, as a video player does at its end
    setPlaying(true);
    timer = setTimeout(tick, stepDelay(Number(speed.value)));
  }

  function step(to) {
    follow = false;
    setPlaying(false);
    show(to, true);
    follow = shown === count - 1; // back at the newest frame: follow again
    onSettle(shown);
  }

  play.addEventListener("click", toggle);
  back.addEventListener("click", () => step(shown - 1));
  forward.addEventListener("click", () => step(shown + 1));
  slider.addEventListener("input", () => step(Number(slider.value)));
  container.tabIndex = 0; // arrow keys and space work once the view has focus
  container.addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT" || e.target.tagName === "SELECT") return;
    if (e.key === "ArrowLeft") step(shown - 1);
    else if (e.key === "ArrowRight") step(shown + 1);
    else if (e.key === " ") toggle();
    else return;
    e.preventDefault();
  });

  return {
    // `n` frames now. At first (`arriving` false) open on the newest or the saved frame; later, a follower
    // plays through the new frames, anyone else just sees the slider grow.
    setCount(n, arriving) {
      count = n;
      slider.max = String(Math.max(n - 1, 0));
      if (!arriving) show(follow ? n - 1 : frame);
      else if (follow && !playing && shown < n - 1) {
        setPlaying(true);
        tick();
      } else show(shown);
    },
    destroy() {
      setPlaying(false);
      document.removeEventListener(SEEK, seek);
    },
  };
}

// Keep a view's timeline, player and notices in step with its widget model; returns the view's cleanup.
export function follow(model, timeline, player, message, error) {
  const words = () => {
    // a live view's notice: the machine is too busy for the times it shows
    message.textContent = [model.get("empty"), model.get("notice") || ""].filter(Boolean).join(" ");
    error.textContent = model.get("error");
  };
  const update = (arriving) => {
    timeline.setFrames(decodeFrames(model.get("frames_json")));
    words();
    player.setCount(timeline.length, arriving);
  };
  const onFrames = () => update(true);
  const onDelta = (message, buffers) => {
    if (message.start === undefined || !buffers?.length) return;
    if (timeline.extend(message.start, decodeFrames(buffers[0]))) player.setCount(timeline.length, true);
  };
  model.on("change:frames_json", onFrames);
  model.on("msg:custom", onDelta);
  model.on("change:empty", words);
  model.on("change:error", words);
  model.on("change:notice", words);
  update(false);
  return () => {
    player.destroy();
    model.off("change:frames_json", onFrames);
    model.off("msg:custom", onDelta);
    model.off("change:empty", words);
    model.off("change:error", words);
    model.off("change:notice", words);
  };
}
