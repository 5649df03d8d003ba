"""The quiz in a real JupyterLab, driven by a real Chromium.

What only a browser can show: JupyterLab's MathJax typesets the $...$ in the widget's
prompts, a click on Check reaches the kernel and comes back with the score, the picked
letter stands out, the first answer stays the score after Try again, and the kernel-free
sheet lists the student's answers with no key anywhere in the page.

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
from workbench.quiz.order import shuffled
from workbench.quiz.widget import STYLE

pytestmark = NEEDS_BROWSER

WIDGET_CELL = """\
from workbench.quiz import Quiz
quiz = Quiz(ids=["speedup-definition", "scalability-definition"], seed="lab")
quiz"""

HTML_CELL = """\
from IPython.display import HTML
from workbench.quiz import load_bank, quiz_html
HTML(quiz_html(questions=[q for q in load_bank() if q.id == "efficiency-from-times"]))"""

BANK = {q.id: shuffled(q, "lab") for q in load_bank()}     # in the letters this learner sees


@pytest.mark.timeout(300)
def test_quiz_scores_the_first_answer_shows_the_pick_and_hides_keys_without_kernel(tmp_path):
    assert "mod-active" in STYLE
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
            # the prompt's *scalability* is in italics, not between asterisks
            assert page.locator(".widget-htmlmath em", has_text="scalability").count() == 1

            q = BANK["speedup-definition"]
            wrong = next(x for x in q.letters if x != q.answer)
            picked = card.get_by_role("button", name=wrong, exact=True)
            picked.click()
            page.wait_for_function(
                "b => getComputedStyle(b).backgroundColor === 'rgb(21, 101, 192)'",
                arg=picked.element_handle(), timeout=10_000)       # the pick stands out
            others = [card.get_by_role("button", name=x, exact=True) for x in q.letters
                      if x != wrong]
            assert all(b.evaluate("b => getComputedStyle(b).backgroundColor")
                       != "rgb(21, 101, 192)" for b in others)
            page.screenshot(path=str(ARTIFACTS / "quiz_picked.png"), full_page=True)
            card.get_by_role("button", name="Check", exact=True).click()
            page.get_by_text("Score: 0 / 2 (1 of 2 questions answered").wait_for(timeout=30_000)
            assert f"the answer is ({q.answer})" in card.inner_text()

            # the two-click trick: Try again, then the key: practice, and the score stays 0
            card.get_by_role("button", name="Try again", exact=True).click()
            card.get_by_role("button", name=q.answer, exact=True).click()
            card.get_by_role("button", name="Check", exact=True).click()
            card.get_by_text("Practice, not scored.").wait_for(timeout=30_000)
            assert f"Scored: your first answer, ({wrong}): 0 of 1" in card.inner_text()
            assert page.get_by_text("Score: 0 / 2 (1 of 2 questions answered").count() == 1

            # the kernel-free sheet: no key in the page; the student's answers as text
            assert "data-answer" not in page.content()
            assert BANK["efficiency-from-times"].explanation[:30] not in page.content()
            static = page.locator(".wbq-quiz").first
            static.locator("input").fill("3/4")
            static.get_by_role("button", name="Show my answers").click()
            assert static.locator(".wbq-mine").inner_text() == "efficiency-from-times: 3/4"
            page.screenshot(path=str(ARTIFACTS / "quiz.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "quiz_failure.png"), full_page=True)
            raise
