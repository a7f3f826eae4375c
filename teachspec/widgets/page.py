"""A view as HTML that runs by itself: for a lecture hall with no kernel, no server and no network.

A view's frames are computed in Python once, and stepping through them happens in the browser (frames.py), so a
replay needs nothing but its front-end modules, its CSS and its frames. `fragment()` inlines all three into one
piece of HTML; `write()` puts fragments on one page that plays from `file://`: play, pause, step, slider and
speed, with every request to anywhere refused (tests/browser/test_offline.py checks exactly that in headless
Chromium). Views of one log step together there as in a notebook: their front end links them by `link`.

    view.to_html("replay.html")                                    one view (base.py)
    export_html([spec_view, tree_view], "replay.html")             several (export.py): side by side where the
                                                                   width allows, as export.side_by_side lays
                                                                   them out in a notebook

The page hands each view's `render` a small stand-in for the widget model: `get` reads the saved traits, `set`
keeps the frame the player is on, and nothing is ever sent, because nobody listens. A view puts its fragment in
its display data as `text/html`, which is what `jupyter nbconvert --to html` shows when the notebook carries no
widget state (nbconvert's own widget output loads its widget manager from a CDN, which a room without network
cannot reach).
"""

from __future__ import annotations

import html
import json
import uuid
from pathlib import Path
from typing import Any

# The traits a view's front end reads; the frames travel as a parsed JSON array, which decodeFrames accepts.
STATE = ("frame", "empty", "error", "link")


def fragment(view: Any) -> str:
    """`view`'s replay as an HTML fragment that runs by itself: its CSS, its frames and its module, inlined."""
    esm = view._esm
    if "export default { render }" not in esm:
        raise ValueError(f"{type(view).__name__}'s front-end module must end with `export default {{ render }}`: "
                         f"the exported page calls that render function")
    if "</script" in esm.lower():
        raise ValueError(f"{type(view).__name__}'s front-end module contains '</script', which would end the "
                         f"inlined <script> early")
    key = uuid.uuid4().hex[:12]
    state = {name: getattr(view, name) for name in STATE}
    state["following"] = False  # a page is a replay: whatever the view was following has ended
    # "<" escaped inside the JSON, so no text in a frame can close the <script> that holds it
    data = json.dumps(state, ensure_ascii=False).replace("<", "\\u003c")
    frames = view.frames_json.decode("utf-8").replace("<", "\\u003c")
    wide = " ts-wide" if getattr(view, "wide", False) else ""  # a view that needs a row of its own
    return f"""<div class="teachspec-export{wide}">
<style>{view._css}</style>
<div id="ts-{key}"></div>
<script type="application/json" id="ts-{key}-state">{data}</script>
<script type="application/json" id="ts-{key}-frames">{frames}</script>
<script type="module">
{esm}
;{{
  // the widget model, standing in: the saved traits, and a frame number that stays in this page
  const state = JSON.parse(document.getElementById("ts-{key}-state").textContent);
  state.frames_json = JSON.parse(document.getElementById("ts-{key}-frames").textContent);
  const model = {{ get: (name) => state[name], set: (name, value) => {{ state[name] = value; }},
                  save_changes() {{}}, on() {{}}, off() {{}}, send() {{}} }};
  render({{ model, el: document.getElementById("ts-{key}") }});
}}
</script>
</div>"""


def write(views: list[Any], path: str | Path, title: str = "teachspec replay") -> Path:
    """`views` as one HTML page at `path`, side by side where the width allows (teachspec.css); returns the path."""
    body = '<div class="ts-side-by-side">\n' + "\n".join(fragment(view) for view in views) + "\n</div>"
    page = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{html.escape(title)}'
            f'</title>\n</head>\n<body style="margin: 8px 16px">\n<h1 style="font: 600 18px sans-serif">'
            f'{html.escape(title)}</h1>\n{body}\n</body>\n</html>\n')
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path
