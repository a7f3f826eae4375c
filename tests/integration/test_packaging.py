"""What a user installs: the wheel carries the bundled pair, the widgets' front end, and the course: the student
versions of the assignments where the course is, the instructor's sources (the solutions) apart, and the file the
grading sandbox starts by its path."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_wheel_contains_the_models_and_the_widgets_front_end(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("teachspec-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for js in (ROOT / "widgets").glob("*.js"):
        assert f"teachspec/widgets/static/{js.name}" in names
    assert "teachspec/widgets/static/teachspec.css" in names
    for part in ("target/model.safetensors", "draft/model.safetensors", "tokenizer.json", "MODEL_CARD.md"):
        assert f"teachspec/models/tiny/{part}" in names
    assert "teachspec/events.py" in names and "teachspec/radix/tree.py" in names
    assert "teachspec/program/state.py" in names and "teachspec/bench/program.py" in names
    assert "teachspec/course/sandbox_child.py" in names  # the sandbox starts it by its path
    # every module of the package (pyproject.toml lists the packages by hand: a new one must be added there) and the
    # walkthroughs beside the code
    for path in (ROOT / "teachspec").rglob("*.py"):
        module = path.relative_to(ROOT).as_posix()
        if "/course/notebooks/" not in module and "/widgets/static/" not in module:
            assert module in names, f"{module} is not in the wheel: add its package to pyproject.toml"
    for readme in ("teachspec/serving/README.md", "teachspec/bench/README.md"):
        assert readme in names
    assert not any(n.startswith(("tests/", "notebooks/")) for n in names)
    sources = sorted((ROOT / "teachspec" / "course" / "sources").glob("a*.ipynb"))
    assert len(sources) >= 6
    for source in sources:
        assert "### BEGIN SOLUTION" in zipfile.ZipFile(wheel).read(f"teachspec/course/sources/{source.name}").decode()
        copy = f"teachspec/course/notebooks/assignments/{source.name}"
        assert copy in names
        text = zipfile.ZipFile(wheel).read(copy).decode()
        assert "BEGIN SOLUTION" not in text, copy
