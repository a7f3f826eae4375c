"""The front end under Node: its unit tests, its modules as the views load them, and its replay against Python's."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.views import noisy_pair, record
from teachspec.widgets import RadixTreeView, SpeculationView, assets, svg
from teachspec.widgets.frames import replay

ROOT = Path(__file__).parents[2]
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (the front-end tests need node >= 18)")


def node(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run([NODE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_javascript_unit_tests_pass():
    out = node("--test", "tests/js")
    assert "# fail 0" in out


@pytest.mark.parametrize("View", [SpeculationView, RadixTreeView])
def test_each_view_loads_as_one_module_with_a_render_function(View, tmp_path):
    assert 'from "./' not in View._esm  # relative imports cannot be resolved from a string: none are left
    path = tmp_path / "view.mjs"
    path.write_text(View._esm)
    out = node("--input-type=module", "-e", f"const m = await import({json.dumps(path.as_uri())}); "
                                             "console.log(typeof m.default.render)")
    assert out.strip() == "function"
    assert ".tok.accepted" in View._css


def test_the_assets_come_from_the_checkout_in_an_editable_install():
    assert assets.asset_dir() in (assets.PACKAGED, assets.CHECKOUT)
    assert (assets.asset_dir() / "helpers.js").is_file()


@pytest.mark.parametrize("View", [SpeculationView, RadixTreeView])
def test_the_browser_replays_the_frames_to_the_same_states_as_python(View, tmp_path):
    view = View(record(noisy_pair()).events)
    path = tmp_path / "frames.json"
    path.write_bytes(view.frames_json)
    states = json.loads(node("tests/js/replay.mjs", str(path)))
    assert len(states) == len(view.frames) > 10
    for n, state in enumerate(states):
        expected = replay(view.frames, n + 1)
        assert state == {"items": expected.items, "meta": expected.meta, "caption": expected.caption,
                         "event": expected.event}, f"frame {n}"


def test_node_labels_read_the_same_in_the_browser_and_in_the_static_picture():
    items = [{"parent": None, "id": 0, "tokens": 0, "locks": 0},
             {"parent": "n0", "id": 3, "text": " hello world,\nagain", "tokens": 5, "locks": 2},
             {"parent": "n0", "id": 4, "ids": [7, 8], "tokens": 2, "locks": 1},
             {"parent": "n0", "id": 5, "text": "", "tokens": 1, "locks": 0},
             {"parent": "n0", "id": 6, "tokens": 3, "locks": 0},
             {"stub": True, "parent": "n0", "folded": 12, "tokens": 80}]
    helpers = (ROOT / "widgets" / "helpers.js").as_uri()
    script = (f"const h = await import({json.dumps(helpers)}); "
              f"console.log(JSON.stringify({json.dumps(items)}.map((item) => h.nodeLines(item))))")
    out = node("--input-type=module", "-e", script)
    assert json.loads(out) == [list(svg.label(item)) for item in items]
