"""The quiz in a real JupyterLab, driven by a real Chromium.

What only a browser can show: JupyterLab's MathJax typesets the $...$ in the widget's
prompts and feedback, a click on Check reaches the kernel and comes back with the score,
and the kernel-free HTML version checks an answer with its inline script alone.

Needs Debian's Chromium (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import pytest
from labdriver import (
    ARTIFACTS,
    NEEDS_BROWSER,
    chromium_page,
    jupyter_lab,
    open_and_run,
    write_notebook,
)

from workbench.quiz import load_bank
from workbench.quiz.bank import shuffled

pytestmark = NEEDS_BROWSER

WIDGET_CELL = """\
from workbench.quiz import Quiz
quiz = Quiz(ids=["speedup-definition", "speedup-from-times"], seed="lab")
quiz"""

HTML_CELL = """\
from IPython.display import HTML
from workbench.quiz import load_bank, quiz_html
HTML(quiz_html(questions=[q for q in load_bank() if q.id == "efficiency-from-times"]))"""


@pytest.mark.timeout(300)
def test_quiz_typesets_maths_scores_clicks_and_checks_without_kernel(tmp_path):
    write_notebook(tmp_path / "quiz.ipynb", [WIDGET_CELL, HTML_CELL])
    ARTIFACTS.mkdir(exist_ok=True)
    with jupyter_lab(tmp_path) as (url, token), chromium_page() as page:
        try:
            open_and_run(page, url, token, "quiz.ipynb")
            card = page.locator(".widget-vbox", has_text="Question 1.").last
            card.get_by_role("button", name="Check", exact=True).wait_for(timeout=120_000)
            # MathJax 3 replaces $T_1 / T_p$ in the choices by an mjx-container element
            page.wait_for_function(
                "() => document.querySelectorAll('.widget-htmlmath mjx-container').length >= 4",
                timeout=60_000)

            q = next(q for q in load_bank() if q.id == "speedup-definition")
            right = shuffled(q, "lab").answer         # the letter this learner sees
            card.get_by_role("button", name=right, exact=True).click()
            card.get_by_role("button", name="Check", exact=True).click()
            page.get_by_text("Score: 1 / 2 (1 of 2 questions checked)").wait_for(timeout=30_000)
            assert "Correct." in card.inner_text()

            # the kernel-free version: the inline script checks 3/4 by itself
            static = page.locator(".wbq").first
            static.locator("input").fill("3/4")
            static.get_by_role("button", name="Check").click()
            assert static.locator(".wbq-result").inner_text() == "Correct."
            assert static.locator("details").evaluate("d => d.open")
            page.screenshot(path=str(ARTIFACTS / "quiz.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "quiz_failure.png"), full_page=True)
            raise
