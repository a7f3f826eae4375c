"""Predict, then run: the student commits to an answer before a cell reveals it.

A prediction made before the answer is on screen is what turns a demonstration into a lesson: a wrong guess is
the moment a student learns. `Predict` shows a question with a few choices (or a box for a number), and a button
that commits the answer; once committed, the choice is locked, so it cannot drift towards what the next cell shows.

    guess = Predict("Which test catches the bug?", ["the chi-square test", "greedy identity", "both"],
                    key="09-which-test")                                       known now: told on commit
    guess = Predict("How many tokens per target pass at k = 4?", number=True,   measured in the next cell
                    key="04-tokens-at-4")
    ...                                                                         (the measurement)
    guess.reveal(measured)                                                      "you said 2.5; it was 3.1"

A lecture asks without telling: the cell's source holds the question and its choices, and the answer and its
explanation are kept under `key` in the course's answers (teachspec/widgets/answers.py), read when the Predict is
built. They stay in Python: nothing of them is sent to the browser before the student commits or presses "Show me"
(which gives up the prediction), so neither the page's source nor the notebook's file gives them away. `reveal`
shows the verdict folded, in a closed `<details>`, open only once the student has committed or asked: a notebook
kept with its outputs (teachspec/course/pin.py) shows a reader who has not run it a box to open, not the answer.
A number counts as right within `tolerance` (relative, 20% unless told).

Without a kernel (a static page) the widget shows its question and choices as HTML; outside a notebook `reveal`
prints the verdict. Once the widget is on screen, `reveal` also writes the verdict under the question.

Its text is 16 px, as every view of the course (readable at a projector's 1280 x 720), not ipywidgets' 13 px:
`readable` gives a form that size, and the sliders of explore.py use it too.
"""

from __future__ import annotations

import html
import numbers
from dataclasses import dataclass, field

from teachspec.widgets.answers import lookup

FOLDED = "teachspec-answer"  # the class of a verdict's <details>: pin.py collapses the output of a cell holding one

# ipywidgets sizes its controls by these variables; set on a form, they hold for every control inside it
STYLE = """<style>
.{name} {{ --jp-widgets-font-size: 16px; --jp-widgets-inline-height: 32px; --jp-widgets-inline-label-width: 14em;
  --jp-widgets-radio-item-height-adjustment: 10px; font-size: 16px; }}
.{name} .widget-html-content {{ font-size: 16px; line-height: 1.45; }}
</style>"""


def readable(box, name: str):
    """`box` (an ipywidgets container) with the class `name` and the 16 px style for it; returns the box."""
    import ipywidgets as w  # here: the package imports without ipywidgets

    box.children = (w.HTML(STYLE.format(name=name), layout=w.Layout(display="none")), *box.children)
    box.add_class(name)
    return box


def _number(x) -> bool:
    """A plain number: an int, a float, a numpy scalar; not a bool, which Python counts as an int."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _same(guess, answer, tolerance: float) -> bool:
    if _number(answer) and _number(guess):
        return abs(guess - answer) <= tolerance * max(abs(answer), 1e-12)
    return guess == answer


@dataclass
class Predict:
    """One prediction: `question`, `choices` (or `number=True` for a number), and `key`, under which the course
    keeps the `answer` (if it is known before the run; else give it to `reveal`) and `explain`, shown once the answer
    is. Outside the course, `answer` and `explain` may be given directly instead of a key."""

    question: str
    choices: list[str] | None = None
    key: str | None = None
    answer: str | float | None = None
    explain: str = ""
    number: bool = False
    tolerance: float = 0.2
    guess: str | float | None = field(default=None, init=False)  # what the student committed, None before
    shown: bool = field(default=False, init=False)  # the student asked to see the answer without committing

    def __post_init__(self):
        if self.key is not None:
            if self.answer is not None or self.explain:
                raise ValueError(f"give the answer by key={self.key!r} or as answer= and explain=, not both: a "
                                 f"lecture keeps its answers out of its source")
            kept = lookup(self.key)
            self.answer, self.explain = kept.answer, kept.explain
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"question must be a non-empty string, got {self.question!r}")
        if self.number == (self.choices is not None):
            raise ValueError(f"give either choices (a list of at least two strings) or number=True, got "
                             f"choices={self.choices!r}, number={self.number!r}")
        if self.choices is not None and (not isinstance(self.choices, (list, tuple)) or len(self.choices) < 2
                                         or not all(isinstance(c, str) for c in self.choices)):
            raise ValueError(f"choices must be a list of at least two strings, got {self.choices!r}")
        if self.choices is not None and self.answer is not None and self.answer not in self.choices:
            raise ValueError(f"answer={self.answer!r} is not one of the choices {list(self.choices)}")
        if self.number and self.answer is not None and not _number(self.answer):
            raise ValueError(f"answer must be a number when number=True, got {self.answer!r}")
        if not _number(self.tolerance) or not 0 <= self.tolerance < 1:
            raise ValueError(f"tolerance must be a relative error in [0, 1), got {self.tolerance!r}")
        self._widget = self._said = None
        self._measured = None  # what reveal was given: a commit after the measuring cell ran is judged against it

    # -- what the student sees -------------------------------------------------------------------------------------

    def commit(self, guess) -> str:
        """Lock in `guess` (what the button does); returns the message shown under the question."""
        if self.guess is not None:
            raise ValueError(f"a prediction is already committed ({self.guess!r}); it cannot change after the fact")
        if self.shown:
            raise ValueError("the answer was shown before a prediction was committed; there is nothing to predict now")
        if self.choices is not None and guess not in self.choices:
            raise ValueError(f"guess={guess!r} is not one of the choices {list(self.choices)}")
        if self.number and not _number(guess):
            raise ValueError(f"guess must be a number, got {guess!r}")
        self.guess = guess
        known = self._known
        if known is None:
            return f"You predicted {guess}. Now run the next cell."
        return self._verdict(known)

    @property
    def _known(self):
        """The answer as far as it is known now: given up front, or revealed by the cell that measured it."""
        return self.answer if self.answer is not None else self._measured

    def show(self) -> str:
        """What "Show me" does: give up the prediction and see the answer now (when it is known before the run)."""
        self.shown = True
        known = self._known
        if known is None:
            return "The answer is measured: run the cells below, and the verdict appears where they reveal it."
        return self._verdict(known)

    def verdict(self, answer=None) -> str:
        """The verdict as text: what was predicted beside `answer` (what the run measured; it may be left out when
        the answer is known before the run), and the explanation."""
        answer = self.answer if answer is None else answer
        if answer is None:
            raise ValueError("reveal needs the answer: this prediction was made without one, so pass what the run "
                             "measured, e.g. guess.reveal(3.1)")
        return self._verdict(answer)

    def reveal(self, answer=None) -> None:
        """Show the verdict under the cell, folded in a closed `<details>` until the student has committed or asked;
        outside a notebook, print it. Also written under the question on screen once the student has committed (a
        run of every cell before that leaves the question open: a later commit is judged against this answer)."""
        text = self.verdict(answer)
        self._measured = self.answer if answer is None else answer
        if self._said is not None and (self.guess is not None or self.shown):  # on screen: under the question too
            self._said.value = html.escape(text)
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            get_ipython = None
        if get_ipython is None or get_ipython() is None:
            print(text)
            return
        display(VerdictBox(text, open=self.guess is not None or self.shown))

    def _verdict(self, answer) -> str:
        shown = f"{answer:.3g}" if _number(answer) and not isinstance(answer, numbers.Integral) else str(answer)
        if self.guess is None:
            head = f"The answer: {shown}."
        elif _same(self.guess, answer, self.tolerance):
            head = f"Right: you predicted {self.guess}, and it is {shown}."
        else:
            head = f"Not this time: you predicted {self.guess}; it is {shown}."
        return f"{head} {self.explain}".strip()

    # -- the notebook widget ---------------------------------------------------------------------------------------

    def widget(self):
        """The ipywidgets form: the question, the choices or a number box, and a Commit button."""
        import ipywidgets as w  # here: the package imports without ipywidgets

        if self._widget is not None:
            return self._widget
        field_ = (w.RadioButtons(options=list(self.choices), value=None, layout=w.Layout(width="auto"))
                  if self.choices is not None else w.FloatText(value=0.0, layout=w.Layout(width="10em")))
        button = w.Button(description="Commit", button_style="primary")
        show = w.Button(description="Show me", tooltip="see the answer without predicting")
        said = self._said = w.HTML()

        def on_commit(_):
            if field_.value is None:
                said.value = "<i>Choose an answer first.</i>"
                return
            said.value = html.escape(self.commit(field_.value))
            field_.disabled = button.disabled = show.disabled = True

        def on_show(_):
            said.value = html.escape(self.show())
            field_.disabled = button.disabled = show.disabled = True

        button.on_click(on_commit)
        show.on_click(on_show)
        box = w.VBox([w.HTML(f"<b>Predict.</b> {html.escape(self.question)}"), field_, w.HBox([button, show]), said],
                     layout=w.Layout(border="1px solid #888", padding="6px", max_width="1100px"))
        self._widget = readable(box, "teachspec-predict")
        return self._widget

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The widget, with the question and its choices as text and as HTML for a page that runs nothing."""
        text = "Predict: " + self.question + "".join(f"\n  ( ) {c}" for c in self.choices or [])
        choices = "".join(f"<li>{html.escape(c)}</li>" for c in self.choices or []) or "<li>a number</li>"
        page = (f"<div class='teachspec-predict'><b>Predict.</b> {html.escape(self.question)}<ul>{choices}</ul>"
                f"<i>Run the notebook to commit your answer here.</i></div>")
        try:
            bundle = self.widget()._repr_mimebundle_(include=include, exclude=exclude)
        except ImportError:  # no ipywidgets: the question as text
            return {"text/plain": text}
        return {**bundle, "text/html": page, "text/plain": text}


@dataclass(frozen=True)
class VerdictBox:
    """A revealed answer as a notebook shows it: folded in a `<details>`, closed unless `open`."""

    text: str
    open: bool = False

    def _repr_mimebundle_(self, include=None, exclude=None):
        state = " open" if self.open else ""
        return {"text/html": f"<details class='{FOLDED}'{state}><summary><b>The answer</b> (open it once you "
                             f"have committed a prediction)</summary><p>{html.escape(self.text)}</p></details>",
                "text/plain": "The answer is folded in this output: a notebook viewer shows it as a box to open."}
