"""Predict (teachspec/widgets/predict.py): a committed answer is locked, a bad one is refused with its value, the
answer stays in Python until the student commits, and the verdicts say what was predicted and what it was."""

from __future__ import annotations

import json

import numpy as np
import pytest

from teachspec.widgets import Predict

w = pytest.importorskip("ipywidgets")

CHOICES = ["the chi-square test", "greedy identity", "both"]
EXPLAIN = "At temperature 0 the residual is never sampled."


def widgets_in(widget) -> list:
    """The widget and every widget inside it."""
    found = [widget]
    for child in getattr(widget, "children", ()):
        found += widgets_in(child)
    return found


def front_end_state(p: Predict) -> str:
    """Everything the browser is sent about the form: every widget's synced traits, as JSON, without model ids
    (which differ between forms)."""
    states = []
    for widget in widgets_in(p.widget()):
        state = widget.get_state()
        state.pop("children", None)
        state.pop("layout", None), state.pop("style", None)  # references to other models, by id
        states.append(state)
    return json.dumps(states, sort_keys=True, default=repr)


def field_and_button(p: Predict):
    form = p.widget()
    field = next(c for c in widgets_in(form) if isinstance(c, (w.RadioButtons, w.FloatText)))
    button = next(c for c in widgets_in(form) if isinstance(c, w.Button) and c.description == "Commit")
    said = form.children[-1]
    return field, button, said


def show_button(p: Predict):
    return next(c for c in widgets_in(p.widget()) if isinstance(c, w.Button) and c.description == "Show me")


# -- committing ----------------------------------------------------------------------------------------------------

def test_commit_locks_the_answer_and_a_second_commit_is_refused():
    p = Predict("Which test catches the bug?", CHOICES, answer="the chi-square test", explain=EXPLAIN)
    assert p.guess is None
    said = p.commit("greedy identity")
    assert p.guess == "greedy identity"
    assert said == f"Not this time: you predicted greedy identity; it is the chi-square test. {EXPLAIN}"
    with pytest.raises(ValueError, match=r"already committed \('greedy identity'\).*cannot change"):
        p.commit("the chi-square test")
    assert p.guess == "greedy identity"  # unchanged


def test_the_button_commits_locks_the_form_and_shows_the_verdict():
    p = Predict("Which test catches the bug?", CHOICES, answer="the chi-square test", explain=EXPLAIN)
    field, button, said = field_and_button(p)
    button.click()  # nothing chosen yet: nothing committed
    assert p.guess is None and "Choose an answer first" in said.value and not button.disabled
    field.value = "the chi-square test"
    button.click()
    assert p.guess == "the chi-square test" and field.disabled and button.disabled
    assert said.value.startswith("Right: you predicted the chi-square test, and it is the chi-square test.")
    assert EXPLAIN in said.value


def test_a_number_is_committed_from_its_box():
    p = Predict("How many tokens per target pass at k = 4?", number=True)
    field, button, said = field_and_button(p)
    field.value = 2.5
    button.click()
    assert p.guess == 2.5 and said.value == "You predicted 2.5. Now run the next cell."
    assert field.disabled and button.disabled


@pytest.mark.parametrize("guess", ["chi-square", "", None, 2, "Both"])
def test_a_guess_that_is_not_a_choice_is_refused_naming_it(guess):
    p = Predict("Which test catches the bug?", CHOICES)
    with pytest.raises(ValueError) as refused:
        p.commit(guess)
    message = str(refused.value)
    assert f"guess={guess!r} is not one of the choices" in message and "greedy identity" in message
    assert p.guess is None  # nothing locked


@pytest.mark.parametrize("guess", ["2.5", None, True, [2.5]])
def test_a_guess_that_is_not_a_number_is_refused_naming_it(guess):
    p = Predict("How many?", number=True)
    with pytest.raises(ValueError, match=f"guess must be a number, got {guess!r}".replace("[", r"\[")):
        p.commit(guess)
    assert p.guess is None


@pytest.mark.parametrize("kwargs, words", [
    ({"question": ""}, "question must be a non-empty string"),
    ({"question": "Q?"}, "give either choices"),
    ({"question": "Q?", "choices": CHOICES, "number": True}, "give either choices"),
    ({"question": "Q?", "choices": ["only one"]}, "choices must be a list of at least two strings"),
    ({"question": "Q?", "choices": CHOICES, "answer": "neither"}, "answer='neither' is not one of the choices"),
    ({"question": "Q?", "number": True, "answer": "3"}, "answer must be a number when number=True, got '3'"),
    ({"question": "Q?", "number": True, "answer": True}, "answer must be a number when number=True, got True"),
    ({"question": "Q?", "number": True, "tolerance": 1.5}, "tolerance must be a relative error in [0, 1), got 1.5"),
    ({"question": "Q?", "number": True, "tolerance": -0.1}, "tolerance must be a relative error in [0, 1), got -0.1"),
])
def test_a_badly_made_prediction_is_refused(kwargs, words):
    with pytest.raises(ValueError) as refused:
        Predict(**kwargs)
    assert words in str(refused.value)


# -- the answer stays in Python ------------------------------------------------------------------------------------

def test_a_number_answer_is_nowhere_in_the_front_end_before_commit():
    p = Predict("Tokens per target pass at k = 4?", number=True, answer=3.37, explain="Eq. 1 says so.")
    state = front_end_state(p)
    assert "3.37" not in state and "Eq. 1 says so" not in state and "Right" not in state
    field, button, said = field_and_button(p)
    field.value = 3.3
    button.click()
    assert "3.37" in front_end_state(p) and "Eq. 1 says so" in front_end_state(p)  # told once committed


def test_the_front_end_is_the_same_whichever_choice_is_the_answer():
    """The choices are on screen, so the answer's text is too: nothing may say which one it is."""
    states = {front_end_state(Predict("Which test catches the bug?", CHOICES, answer=a, explain=EXPLAIN))
              for a in CHOICES}
    states.add(front_end_state(Predict("Which test catches the bug?", CHOICES)))  # no answer at all
    assert len(states) == 1
    assert EXPLAIN not in states.pop()


def test_no_widget_trait_holds_the_answer_before_commit():
    """Every child's value, description, options and other traits, one by one."""
    answer, explain = 0.615, "because 0.615 = (1 - 0.3^3) / 0.7 / 1.6"
    p = Predict("What speedup?", number=True, answer=answer, explain=explain)
    for widget in widgets_in(p.widget()):
        for name in widget.keys:
            value = repr(getattr(widget, name))
            assert "0.615" not in value and "because" not in value, (type(widget).__name__, name, value)


# -- what is said ----------------------------------------------------------------------------------------------------

def test_verdict_texts(capsys):
    p = Predict("Tokens per target pass at k = 4?", number=True, explain="Eq. 1 with alpha = 0.85.")
    assert p.verdict(3.69) == "The answer: 3.69. Eq. 1 with alpha = 0.85."
    p.reveal(3.69)  # outside a notebook it prints
    assert capsys.readouterr().out.strip() == "The answer: 3.69. Eq. 1 with alpha = 0.85."
    assert p.commit(3) == "Right: you predicted 3, and it is 3.69. Eq. 1 with alpha = 0.85."  # measured above
    assert Predict("How many?", number=True).commit(3) == "You predicted 3. Now run the next cell."
    assert p.verdict(3.6923) == "Right: you predicted 3, and it is 3.69. Eq. 1 with alpha = 0.85."
    assert p.verdict(4.0) == "Not this time: you predicted 3; it is 4. Eq. 1 with alpha = 0.85."  # 25% under
    with pytest.raises(ValueError, match="reveal needs the answer"):
        p.reveal()


def test_in_a_notebook_reveal_folds_the_answer_until_the_student_has_committed(monkeypatch):
    """A kept output (teachspec/course/pin.py) shows a reader who has not run the notebook a closed box: the answer
    is in it, never in plain text; once the student commits, the box comes open."""
    import IPython
    import IPython.display

    from teachspec.widgets.predict import FOLDED

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", shown.append)
    p = Predict("How many?", number=True, explain="Eq. 1.")
    p.reveal(3.69)
    bundle = shown[-1]._repr_mimebundle_()
    assert f"<details class='{FOLDED}'>" in bundle["text/html"] and "3.69" in bundle["text/html"]
    assert "3.69" not in bundle["text/plain"] and "Eq. 1" not in bundle["text/plain"]
    p.commit(3)
    p.reveal(3.69)
    assert f"<details class='{FOLDED}' open>" in shown[-1]._repr_mimebundle_()["text/html"]


def test_show_me_gives_up_the_prediction_for_the_answer():
    p = Predict("Which test catches the bug?", CHOICES, answer="the chi-square test", explain=EXPLAIN)
    field, button, said = field_and_button(p)
    show_button(p).click()
    assert p.shown and said.value.startswith("The answer: the chi-square test.") and EXPLAIN in said.value
    assert field.disabled and button.disabled and show_button(p).disabled
    with pytest.raises(ValueError, match="the answer was shown before a prediction was committed"):
        p.commit("both")
    measured = Predict("How many?", number=True)
    assert "measured" in measured.show() and measured.shown


def test_a_key_reads_the_answer_the_course_keeps_apart(tmp_path, monkeypatch):
    from teachspec.widgets import answers

    (tmp_path / "04.json").write_text(json.dumps({"04-best-k": {"answer": "8", "explain": "the marginal rate"},
                                                  "04-measured": {"explain": "Eq. 1"}}))
    monkeypatch.setattr(answers, "FOLDER", tmp_path)
    answers.everything.cache_clear()
    try:
        p = Predict("Best k?", ["4", "8"], key="04-best-k")
        assert p.answer == "8" and p.explain == "the marginal rate"
        assert Predict("How many?", number=True, key="04-measured").answer is None
        with pytest.raises(ValueError, match="no answer is kept under the key 'nope'"):
            Predict("Best k?", ["4", "8"], key="nope")
        with pytest.raises(ValueError, match="not both"):
            Predict("Best k?", ["4", "8"], key="04-best-k", answer="8")
        with pytest.raises(ValueError, match="answer='8' is not one of the choices"):
            Predict("Best k?", ["4", "16"], key="04-best-k")
        (tmp_path / "05.json").write_text(json.dumps({"04-best-k": {"answer": "4"}}))
        answers.everything.cache_clear()
        with pytest.raises(ValueError, match="'04-best-k' is in both 04.json and 05.json"):
            answers.everything()
        (tmp_path / "05.json").write_text(json.dumps({"05-x": {"answer": "4", "why": "typo"}}))
        answers.everything.cache_clear()
        with pytest.raises(ValueError, match="05.json: '05-x' must be an object"):
            answers.everything()
    finally:
        answers.everything.cache_clear()


def test_the_course_keeps_a_well_formed_answer_for_each_key():
    from teachspec.widgets.answers import everything

    assert everything(), "teachspec/course/answers/ holds no answers"


def test_a_reveal_before_the_commit_leaves_the_question_open_and_judges_the_later_commit():
    """Run all cells before committing: the measuring cell's reveal writes nothing under the question, and the
    commit that follows is judged against what it measured."""
    p = Predict("How many?", number=True, explain="Eq. 1.")
    field, button, said = field_and_button(p)
    p.reveal(2.1)
    assert said.value == ""
    field.value = 2.0
    button.click()
    assert said.value == "Right: you predicted 2.0, and it is 2.1. Eq. 1."


def test_reveal_writes_the_verdict_under_the_question_too():
    p = Predict("How many?", number=True)
    field, button, said = field_and_button(p)
    field.value = 2.0
    button.click()
    p.reveal(2.1)
    assert said.value == "Right: you predicted 2.0, and it is 2.1."


@pytest.mark.parametrize("guess, answer, tolerance, right", [
    (2.4, 3.0, 0.2, True), (2.39, 3.0, 0.2, False), (3.6, 3.0, 0.2, True), (3.61, 3.0, 0.2, False),
    (8, 8, 0.0, True), (7, 8, 0.0, False), (7, 8, 0.2, True), (0, 0, 0.2, True), (0.1, 0, 0.2, False),
    (1.0, np.float32(1.05), 0.1, True), (1, np.int64(1), 0.0, True)])  # numpy numbers, as a measurement gives
def test_a_number_is_right_within_its_relative_tolerance(guess, answer, tolerance, right):
    p = Predict("How many?", number=True, tolerance=tolerance)
    p.commit(guess)
    assert p.verdict(answer).startswith("Right") == right


def test_a_numpy_answer_is_a_number():
    p = Predict("Best k?", number=True, answer=np.int64(8), tolerance=0.0)
    assert p.commit(np.float64(8.0)).startswith("Right: you predicted 8.0, and it is 8.")


def test_the_question_is_shown_as_text_not_html():
    p = Predict("Is alpha <b>c</b> or alpha < c?", ["<", ">="], answer="<", explain="a <script> is text")
    question = p.widget().children[1]
    assert "&lt;b&gt;c&lt;/b&gt;" in question.value and "alpha &lt; c" in question.value
    field, button, said = field_and_button(p)
    field.value = "<"
    button.click()
    assert "&lt;script&gt;" in said.value and "<script>" not in said.value


def test_without_ipywidgets_the_question_is_text(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ipywidgets(name, *args, **kwargs):
        if name.startswith("ipywidgets"):
            raise ImportError("no ipywidgets here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipywidgets)
    bundle = Predict("Which test?", CHOICES)._repr_mimebundle_()
    text = "Predict: Which test?\n  ( ) the chi-square test\n  ( ) greedy identity\n  ( ) both"
    assert bundle == {"text/plain": text}


def test_in_a_notebook_it_is_a_widget_with_its_question_as_text_too():
    bundle = Predict("Which test?", CHOICES)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].startswith("Predict: Which test?")
    assert "<li>greedy identity</li>" in bundle["text/html"]  # a page without a kernel shows the question
    secret = Predict("Which test?", CHOICES, answer="both", explain="the residual")._repr_mimebundle_()
    assert secret["text/html"] == bundle["text/html"] and "residual" not in secret["text/plain"]


def test_its_text_is_readable_at_a_projector():
    form = Predict("Which test?", CHOICES).widget()
    assert "teachspec-predict" in form._dom_classes
    assert "--jp-widgets-font-size: 16px" in form.children[0].value
