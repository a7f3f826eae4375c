// Replays frames the way the views do and prints the state after each one, for tests/test_widgets_js.py to
// compare with Python's own replay: `node tests/js/replay.mjs frames.json` prints a JSON list of states.
import { readFileSync } from "node:fs";

import { Timeline, decodeFrames } from "../../widgets/helpers.js";

const frames = decodeFrames(readFileSync(process.argv[2]));
const timeline = new Timeline(frames, 8);
// forward to the end, then backward, so both directions of stepping are exercised
const states = new Array(frames.length);
for (const n of [...frames.keys(), ...[...frames.keys()].reverse()]) {
  const s = timeline.stateAt(n);
  const state = { items: Object.fromEntries(s.items), meta: s.meta, caption: s.caption, event: s.event };
  if (states[n] !== undefined && JSON.stringify(states[n]) !== JSON.stringify(state)) {
    throw new Error(`frame ${n}: stepping back gave a different state than stepping forward`);
  }
  states[n] = state;
}
process.stdout.write(JSON.stringify(states));
