"""The review question bank and its widget: the bank is complete and right (its numbers are
recomputed with the course's own formulas), grading explains every answer, and the widget
scores, explains and resets when driven headlessly."""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Iterable
from pathlib import Path

import ipywidgets as widgets
import nbformat
import pytest
import yaml

from workbench.model_parallel.schedule import idle_fraction
from workbench.quiz import TOPICS, BankError, Quiz, fairness, grade, load_bank
from workbench.quiz.bank import BANK_PATH, addresses, mentions, parse_number
from workbench.quiz.order import in_learner_order, learner_seed, shuffled
from workbench.quiz.sheet import answer_sheet, quiz_html
from workbench.quiz.widget import STYLE
from workbench.scaling import costmodel, metrics
from workbench.sharded import costmodel as sharded
from workbench.synchronization.checkpoint_interval import young_interval
from workbench.tensor_parallel import traffic

BANK = {q.id: q for q in load_bank()}
BANK_ITEMS = tuple(BANK.values())
REPO = Path(__file__).resolve().parents[1]

REVIEW_IDS = ("review-efficiency", "review-synchronization", "review-parallelism")


# --- the bank ---------------------------------------------------------------------------------

def test_bank_has_at_least_30_complete_questions():
    assert len(BANK) >= 30
    for q in BANK.values():
        assert q.prompt and q.explanation and q.answer is not None, q.id
        if q.kind in ("single", "multiple"):
            assert len(q.choices) >= 2, q.id
        if q.kind == "explain":
            assert q.model_answer and len(q.rubric) >= 4, q.id
            assert all(p.point and p.earns and p.keywords for p in q.rubric), q.id


def test_every_topic_is_covered_with_every_kind_used():
    topics = {q.topic for q in BANK.values()}
    assert topics == set(TOPICS)
    assert {q.kind for q in BANK.values()} == {"single", "multiple", "numeric", "explain"}


def test_the_three_review_questions_of_the_course_are_there():
    for qid, words in zip(REVIEW_IDS, (["efficiency", "single device"],
                                       ["synchronized", "challenges"],
                                       ["data parallelism", "model parallelism"]),
                          strict=True):
        q = BANK[qid]
        assert q.kind == "explain"
        assert all(w in q.prompt for w in words), q.prompt


# The bank's numeric answers, recomputed with the course's formulas.
EXPECTED = {
    "speedup-from-times": metrics.speedup(120, 40),
    "efficiency-from-times": metrics.efficiency(metrics.speedup(150, 25), 8),
    "efficiency-from-throughput": metrics.efficiency(
        metrics.speedup_from_throughput(1640, 1000), 2),
    "amdahl-value": metrics.amdahl(8, 0.9),
    "amdahl-limit": metrics.amdahl(1e12, 0.95),
    "gustafson-value": metrics.gustafson(8, 0.9),
    "karp-flatt-value": metrics.karp_flatt(5, 8),
    "ring-time": costmodel.ring_allreduce_time(500e6, 5, 0.0, 1 / 1e9),
    "ring-bytes-per-worker": costmodel.ring_allreduce_time(100, 4, 0.0, 1.0),  # MB at β = 1
    "ring-messages": costmodel.ring_allreduce_time(1, 8, 1.0, 0.0),          # count of α
    "halving-doubling-rounds": costmodel.rabenseifner_allreduce_time(1, 64, 1.0, 0.0),  # α
    "parameter-server-traffic": costmodel.parameter_server_time(100, 8, 0.0, 1.0),
    "bubble-value": idle_fraction(4, 8),
    "bubble-at-4p": idle_fraction(4, 16),
    "consistency-update": 1.0 - 0.1 * (2 + 4) / 2,
    "training-memory": 3e9 * 16 / 1e9,
    "global-batch": 16 * 32,
    "linear-scaling-rule": 0.1 * 1024 / 256,
    "staleness-value": 13 - 10,
    "staleness-learning-rate": 0.12 / 4,
    "faults-young-interval": young_interval(60, 86_400) / 60,
    "parameter-server-sharded-traffic": costmodel.parameter_server_time(100, 8, 0.0, 1.0,
                                                                        servers=4),
    "tensor-parallel-bytes": traffic.block_bytes_per_step(1024, 2048, 2) / 2**20,
    # one all-reduce of 400 MB per N·k·b samples, of which a ring sends 2(N-1)/N per rank
    "accumulation-traffic": costmodel.ring_allreduce_time(400, 8, 0.0, 1.0)
    * 1024 / (8 * 4 * 32),
    "zero2-memory-7b": sharded.model_states(7.5e9, 64, "zero2", 12).total / 1e9,
    "zero3-traffic-ratio": sharded.sent_per_step(1, 8, "zero3") / sharded.sent_per_step(
        1, 8, "ddp"),
}


@pytest.mark.parametrize("qid", sorted(EXPECTED))
def test_numeric_answers_agree_with_the_course_formulas(qid):
    q = BANK[qid]
    assert q.kind == "numeric"
    assert abs(q.answer - EXPECTED[qid]) <= q.tolerance + 1e-9, (q.answer, EXPECTED[qid])
    assert grade(q, EXPECTED[qid]).correct


def test_every_numeric_question_is_cross_checked():
    assert {q.id for q in BANK.values() if q.kind == "numeric"} == set(EXPECTED)


def test_topic_filter_and_unknown_topic():
    ring = load_bank(topic="ring-allreduce")
    assert ring and all(q.topic == "ring-allreduce" for q in ring)
    with pytest.raises(BankError, match="unknown topic 'nope'; choose one of: metrics"):
        load_bank(topic="nope")


@pytest.mark.parametrize("change, message", [
    (lambda q: q.pop("explanation"), "the field 'explanation' is missing"),
    (lambda q: q.update(answer="z"), "answer 'z' must be a letter among a, b, c, d"),
    (lambda q: q.update(kind="essay"), "kind 'essay' is not one of"),
    (lambda q: q.update(topic="cooking"), "topic 'cooking' is not one of"),
])
def test_a_broken_bank_is_refused_with_a_clear_message(tmp_path, change, message):
    raw = yaml.safe_load(BANK_PATH.read_text())
    change(raw[0])
    path = tmp_path / "bank.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BankError, match=message.replace("(", r"\(")):
        load_bank(path=path)


def test_duplicate_ids_and_unreadable_files_are_refused(tmp_path):
    raw = yaml.safe_load(BANK_PATH.read_text())
    path = tmp_path / "bank.yaml"
    path.write_text(yaml.safe_dump([raw[0], raw[0]]))
    with pytest.raises(BankError, match="two questions have the id 'speedup-definition'"):
        load_bank(path=path)
    with pytest.raises(BankError, match="cannot read the question bank"):
        load_bank(path=Path(tmp_path / "missing.yaml"))


# --- grading ----------------------------------------------------------------------------------

def test_single_choice_right_wrong_and_blank():
    q = BANK["speedup-definition"]
    assert grade(q, "b").correct and grade(q, "b").feedback.startswith("Correct.")
    wrong = grade(q, "a")
    assert not wrong.correct and wrong.score == 0
    assert "the answer is (b) $T_1 / T_p$" in wrong.feedback
    assert "inverted ratio" in wrong.feedback            # why (a) is wrong
    assert "Pick one answer first" in grade(q, None).feedback


def test_multiple_choice_names_missing_and_false_statements():
    q = BANK["data-parallel-properties"]
    assert grade(q, ["c", "b"]).correct
    g = grade(q, ["a", "d"])
    assert not g.correct
    assert "(d) is false. Sharded data parallelism (ZeRO-3, FSDP) is still" in g.feedback
    assert "(a) is false. Each replica trains on a shard of its own" in g.feedback
    assert "(b) is true as well" in g.feedback and "(c) is true as well" in g.feedback


def test_numeric_accepts_fractions_and_percentages_within_tolerance():
    q = BANK["efficiency-from-times"]
    assert grade(q, "3/4").correct and grade(q, "75%").correct and grade(q, "0,75").correct
    g = grade(q, "3")
    assert not g.correct and "you entered 3, the answer is 0.75" in g.feedback
    assert "Enter a number" in grade(q, "three").feedback
    assert parse_number("1/0") is None and parse_number(float("nan")) is None


def test_thousands_separators_and_decimal_commas_are_told_apart():
    assert parse_number("1,600") == 1600 and parse_number("12,000.5") == 12000.5
    assert parse_number("0,75") == 0.75 and parse_number("1,5") == 1.5
    assert grade(BANK["parameter-server-traffic"], "1,600").correct
    assert grade(BANK["parameter-server-traffic"], "1600 ").correct


def test_keywords_match_at_the_start_of_words_only():
    assert not mentions("a clear benefit", "fit") and mentions("it fits in memory", "fit")
    assert mentions("they synchronize", "synchroni") and not mentions("asynchronous", "synchroni")
    q = BANK["review-efficiency"]
    hints = grade(q, "Several devices compute in parallel, a clear benefit.").hints
    assert "Memory" in hints and "Parallel computation" not in hints


def test_explain_counts_a_ticked_point_only_where_the_answer_makes_it():
    q = BANK["review-parallelism"]
    text = "Data parallelism keeps a replica on every device, so the model must fit in memory."
    every = range(len(q.rubric))
    g = grade(q, text, covered=every)                   # every box ticked
    assert g.score == pytest.approx(2 / len(q.rubric)) and not g.correct
    assert "Model answer: Data parallelism trains the same model" in g.feedback
    assert "[ticked, not counted] Model parallelism: limits" in g.feedback
    assert "Model parallelism: limits" in g.hints and "Data parallelism: limits" not in g.hints
    assert grade(q, text, covered=[0]).score == pytest.approx(1 / len(q.rubric))
    full = grade(q, q.model_answer, covered=every)
    assert full.correct and full.score == 1 and not full.hints


@pytest.mark.parametrize("qid", REVIEW_IDS)
def test_an_empty_or_copied_written_answer_scores_nothing_whatever_is_ticked(qid):
    q = BANK[qid]
    every = range(len(q.rubric))
    for text in ("", "   ", q.prompt, q.prompt.upper()):
        g = grade(q, text, covered=every)
        assert g.score == 0 and not g.correct, (qid, text)
    assert "Your answer is empty: it scores nothing" in grade(q, "", every).feedback


def test_a_key_term_the_question_already_uses_is_no_evidence():
    q = BANK["review-efficiency"]               # its question says "efficiency"
    measured = next(p for p in q.rubric if p.point == "Measured, and not free")
    assert not addresses(measured, "It improves efficiency.", q.prompt)
    assert addresses(measured, "Communication keeps it below linear.", q.prompt)


def test_the_model_answers_make_their_own_rubric_points():
    for qid in REVIEW_IDS:
        q = BANK[qid]
        assert grade(q, q.model_answer).hints == (), qid


# --- the widget: the first answer counts --------------------------------------------------------

def test_the_first_committed_answer_is_the_score_and_practice_changes_nothing():
    ids = ["speedup-from-times", "speedup-definition", "strong-vs-weak-scaling"]
    quiz = Quiz(ids=ids, shuffle=False)
    assert quiz.summary().startswith("Score: 0 / 3 (0 of 3 questions answered")
    assert isinstance(quiz.cards["speedup-from-times"].prompt, widgets.HTMLMath)

    quiz.answer("speedup-from-times", "3")
    assert quiz.check("speedup-from-times").correct and quiz.score == 1
    quiz.answer("speedup-definition", "c")
    assert not quiz.check("speedup-definition").correct
    assert "efficiency, not the speedup" in quiz.feedback("speedup-definition")
    shown = quiz.cards["speedup-definition"].output.value
    assert "$T_1 / T_p$" in shown and "#c62828" in shown        # typeset maths, in red

    # the two-click trick: the key is on display, Try again, then the key
    quiz.retry("speedup-definition")
    card = quiz.cards["speedup-definition"]
    assert quiz.feedback("speedup-definition") == "" and card.input.value is None
    assert "Scored: your first answer, (c): <b>0 of 1</b>" in card.record.value
    quiz.answer("speedup-definition", "b")
    g = quiz.check("speedup-definition")
    assert g.correct and "Practice, not scored." in card.output.value
    assert quiz.score == 1 and not quiz.first_grade("speedup-definition").correct
    assert "(c): <b>0 of 1</b>" in card.record.value
    quiz.retry()                                              # Try again everywhere
    assert quiz.score == 1 and quiz.checked == 2
    quiz.answer("strong-vs-weak-scaling", ["a", "c"])
    quiz.check("strong-vs-weak-scaling")
    assert quiz.score == 2
    assert "Score: 2 / 3 (3 of 3 questions answered" in quiz.score_label.value


def test_the_key_is_shown_only_after_an_answer_is_committed():
    quiz = Quiz(ids=["speedup-definition", "efficiency-from-times", "review-efficiency"],
                shuffle=False)
    assert all(c.output.value == "" for c in quiz.cards.values())
    for qid, blank in (("speedup-definition", None), ("efficiency-from-times", "three"),
                       ("review-efficiency", "  ")):
        quiz.answer(qid, blank, covered=range(5))
        g = quiz.check(qid)
        q, card = BANK[qid], quiz.cards[qid]
        assert g.score == 0 and quiz.first_grade(qid) is None, qid    # nothing committed
        shown = html.unescape(card.output.value)
        assert q.explanation[:30] not in shown and "Model answer" not in shown, qid
        assert card.retry_button.disabled and shown, qid           # it says why, not the key
    assert quiz.score == 0 and quiz.checked == 0
    quiz.answer("efficiency-from-times", "0.75")
    quiz.check("efficiency-from-times")
    assert "six GPUs' worth of work" in html.unescape(
        quiz.cards["efficiency-from-times"].output.value)
    assert quiz.cards["efficiency-from-times"].input.disabled     # committed: locked


def sent_to_browser(widget: widgets.Widget) -> str:
    """Every text of a widget and its children, hidden ones included: what the page holds."""
    texts = [str(v) for k, v in widget.get_state().items()
             if isinstance(v, str | list | tuple) and k != "children"]
    return "\n".join(texts + [sent_to_browser(c) for c in getattr(widget, "children", ())])


def test_the_page_holds_no_key_before_an_answer_is_committed():
    quiz = Quiz()
    page = html.unescape(sent_to_browser(quiz))
    for q in BANK.values():
        card = html.unescape(sent_to_browser(quiz.cards[q.id].box))
        for secret in (q.explanation, q.model_answer, *q.why.values(),
                       *(p.point for p in q.rubric), *(p.earns for p in q.rubric)):
            assert not secret or secret not in card, (q.id, secret)
    # the example beside every number box is no question's answer
    examples = [parse_number(x) for x in re.findall(r"e\.g\. (\S+) or (\S+)['\"]?", page)[0]]
    assert examples[0] == examples[1]
    assert all(abs(examples[0] - q.answer) > q.tolerance for q in BANK.values()
               if q.kind == "numeric")
    written = BANK["review-efficiency"]
    quiz.answer(written.id, "Devices work in parallel.")
    quiz.check(written.id)
    shown = sent_to_browser(quiz.cards[written.id].rubric_box)
    assert all(p.point in shown for p in written.rubric)       # once committed, to tick


def test_a_written_answer_scores_the_points_it_makes_however_many_are_ticked():
    quiz = Quiz(ids=["review-efficiency"])
    card = quiz.cards["review-efficiency"]
    quiz.answer("review-efficiency", "Devices work in parallel, so it saves time.")
    quiz.check("review-efficiency")
    assert quiz.score == 0 and card.rubric_box.layout.display == "flex"
    for box in card.rubric:                  # tick every point, after seeing the rubric
        box.value = True
    assert quiz.score == pytest.approx(1 / len(card.rubric))
    assert "1 of 5 count" in card.output.value and "Scored: your first answer" in card.record.value
    quiz.retry("review-efficiency")          # practice with the model answer changes nothing
    quiz.answer("review-efficiency", BANK["review-efficiency"].model_answer)
    assert quiz.check("review-efficiency").score == 1 and "Practice" in card.output.value
    assert quiz.score == pytest.approx(1 / len(card.rubric))


def test_reveal_shows_every_key_and_scores_nothing_unanswered():
    quiz = Quiz(topic="pipeline")
    first = quiz.questions[0]
    quiz.answer(first.id, first.answer if first.kind != "numeric" else first.answer)
    quiz.check(first.id)
    quiz.reveal()
    assert quiz.score == 1 and quiz.checked == len(quiz.cards)
    assert all(quiz.feedback(q.id).startswith("Correct.") for q in quiz.questions)
    with pytest.raises(KeyError, match="no question with id 'nope'"):
        Quiz(ids=["nope"])
    with pytest.raises(KeyError, match="this quiz has no question 'x'"):
        quiz.check("x")
    with pytest.raises(ValueError, match="no question of lesson 'nope'; lessons with"):
        Quiz(lesson="nope")


def test_every_key_in_the_learners_order_scores_full_marks():
    quiz = Quiz(seed="grace")
    for q in quiz.questions:
        quiz.answer(q.id, q.model_answer if q.kind == "explain" else q.answer,
                    covered=range(len(q.rubric)))
        quiz.check(q.id)
    assert quiz.score == len(BANK)


def test_the_picked_letter_is_styled_to_stand_out():
    quiz = Quiz(ids=["speedup-definition"])
    assert "wbq-choice" in quiz.cards["speedup-definition"].input._dom_classes
    assert STYLE in quiz.children[0].value and "font-weight:bold" in STYLE
    assert ".wbq-choice .widget-toggle-button.mod-active" in STYLE


def test_prompts_show_emphasis_not_asterisks():
    quiz = Quiz(ids=["scalability-definition"])
    shown = quiz.cards["scalability-definition"].prompt.value
    assert "<em>scalability</em>" in shown and "*scalability*" not in shown


# --- the page without a kernel, and the teacher's answer sheet ----------------------------------

def test_the_kernel_free_page_carries_no_key():
    for seed in SEEDS[:3]:
        page = quiz_html(seed=seed)
        assert "data-answer" not in page and "<script" not in page and "<details" not in page
        for q in BANK.values():
            for hidden in (q.explanation, q.model_answer, *q.why.values()):
                assert not hidden or hidden[:40] not in html.unescape(page), q.id
        # every option is written alike: nothing but its letter and text tells them apart
        labels = re.findall(r"<label[^>]*>(.*?)</label>", page)
        forms = {re.sub(r"\(([a-z])\) .*", "", label) for label in labels}
        assert len(labels) >= len(CHOICE_QUESTIONS) * 4 and len(
            {re.sub(r"name='[^']*'", "", f) for f in forms}) == 2   # radio or checkbox
    assert "Show my answers" in page


def test_the_answer_sheet_gives_every_key_by_its_text():
    sheet = html.unescape(answer_sheet())
    for q in BANK.values():
        assert q.id in sheet
        if q.kind == "single":
            assert q.choice(q.answer).replace("`", "") in sheet.replace("<code>", "").replace(
                "</code>", ""), q.id
        if q.kind == "numeric":
            assert f"Answer: {q.answer:g}" in sheet
        if q.kind == "explain":
            assert q.model_answer[:40] in sheet


# --- fair to every learner: no key learned by position -------------------------------------------

CHOICE_QUESTIONS = [q for q in BANK.values() if q.kind in ("single", "multiple")]
SEEDS = ["ada", "grace", "alan", "barbara", "edsger", "learner", 0, 1, 2, 3]


def first_option_score(questions) -> float:
    """The share of choice questions answered right by always ticking the first option."""
    return sum(q.answer in ("a", ["a"]) for q in questions) / len(questions)


def shown_choices(page: str) -> list[str]:
    """The text of every option of a kernel-free page, in the order shown."""
    return [html.unescape(re.sub(r"<[^>]+>", "", text))
            for text in re.findall(r"> \([a-z]\) (.*?)</label>", page)]


def test_no_key_letter_holds_more_than_40_percent_of_single_choice_questions():
    singles = [q.answer for q in BANK.values() if q.kind == "single"]
    for letter in "abcd":
        assert singles.count(letter) / len(singles) <= 0.40, (letter, singles.count(letter))
    assert len({tuple(q.answer) for q in BANK.values() if q.kind == "multiple"}) > 1


def test_always_picking_the_first_option_scores_under_40_percent_in_every_order():
    assert first_option_score(CHOICE_QUESTIONS) < 0.40          # the bank's own order
    for seed in SEEDS:
        shown = [q for q in in_learner_order(list(BANK.values()), seed)
                 if q.kind in ("single", "multiple")]
        assert first_option_score(shown) < 0.40, seed
        plain = [re.sub(r"[`*$]", "", c) for q in shown for c in q.choices]
        assert [re.sub(r"[`*$]", "", c) for c in shown_choices(quiz_html(seed=seed))] == plain
    # the widget shows the same order (one whole quiz: building one costs about a second)
    assert Quiz(seed=SEEDS[0]).questions == in_learner_order(list(BANK.values()), SEEDS[0])


def test_each_learner_sees_one_order_in_widget_and_html_and_is_graded_in_it():
    q = BANK["sync-sgd"]
    orders = {shuffled(q, seed).choices for seed in SEEDS}
    assert len(orders) > 1                          # learners see different orders
    mine = shuffled(q, "ada")
    assert shuffled(q, "ada") == mine               # and the same one every time
    assert sorted(mine.choices) == sorted(q.choices)
    assert mine.choice(mine.answer) == q.choice(q.answer)
    for letter, reason in q.why.items():            # each note follows its choice
        moved = mine.letters[mine.choices.index(q.choice(letter))]
        assert mine.why[moved] == reason

    quiz = Quiz(ids=["sync-sgd"], seed="ada")
    assert quiz.cards["sync-sgd"].q.choices == mine.choices
    assert shown_choices(quiz_html(questions=[q], seed="ada")) == list(mine.choices)

    wrong = next(x for x in mine.letters if x != mine.answer)
    quiz.answer("sync-sgd", wrong)
    g = quiz.check("sync-sgd")
    assert not g.correct and f"the answer is ({mine.answer})" in g.feedback
    assert f"About ({wrong}): {mine.why[wrong]}" in g.feedback
    quiz.retry("sync-sgd")
    quiz.answer("sync-sgd", mine.answer)
    assert quiz.check("sync-sgd").correct and quiz.score == 0


def test_the_learner_is_who_jupyterhub_says_with_an_id_kept_in_their_home(monkeypatch,
                                                                           tmp_path):
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    monkeypatch.delenv("WORKBENCH_LEARNER_DIR")             # the default: in the home
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "ada-home"))
    seed = learner_seed()
    name, found = seed.split(":")
    assert name == "ada" and re.fullmatch(r"[0-9a-f]{32}", found)
    kept = tmp_path / "ada-home" / "workbench" / "learner-id"
    assert kept.read_text().strip() == found and kept.stat().st_mode & 0o777 == 0o600
    assert learner_seed() == seed                      # the same order on every use
    assert Quiz(ids=["sync-sgd"]).questions[0] == shuffled(BANK["sync-sgd"], seed)
    assert quiz_html(questions=[BANK["sync-sgd"]]) == quiz_html(
        questions=[BANK["sync-sgd"]], seed=seed)


def test_learners_who_share_a_login_name_see_different_orders(monkeypatch, tmp_path):
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    monkeypatch.setattr("getpass.getuser", lambda: "jovyan")   # Binder: everyone is jovyan
    monkeypatch.delenv("WORKBENCH_LEARNER_DIR")
    seeds = []
    for home in ("one", "two"):
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / home))
        seeds.append(learner_seed())
    assert seeds[0] != seeds[1] and all(s.startswith("jovyan:") for s in seeds)
    orders = [[shuffled(q, s).choices for q in CHOICE_QUESTIONS] for s in seeds]
    assert sum(a != b for a, b in zip(*orders, strict=True)) > len(CHOICE_QUESTIONS) / 2
    (tmp_path / "two" / "workbench" / "learner-id").write_text("damaged")
    assert learner_seed() not in seeds                   # a damaged id is replaced
    monkeypatch.setenv("XDG_CONFIG_HOME", "/proc/no-such-home")   # cannot be written
    assert learner_seed() == "jovyan"


# --- fairness: no knowledge-free strategy passes --------------------------------------------

def test_no_knowledge_free_strategy_beats_chance_by_more_than_10_points():
    """Over the whole bank, items appended later included (the table is printed)."""
    questions = list(BANK.values())
    print("\n" + fairness.report(questions))
    assert fairness.unfair(questions) == []
    kinds = {row.kind for row in fairness.table(questions)}
    assert kinds == {"single", "multiple", "numeric", "explain"}
    right, wrong = fairness.absolute_rates(questions)
    assert abs(right - wrong) <= 0.10, (right, wrong)


def shown_beside(q, bank: Iterable = BANK_ITEMS) -> list[float]:
    """The numbers within `q`'s tolerance of its answer that the other questions of its
    quizzes (its lesson's, its topic's) show: their prompts and choices at once, their
    explanations and notes once answered."""
    return [v for o in bank if o.id != q.id and (o.lesson == q.lesson or o.topic == q.topic)
            for v in fairness.numbers(" ".join([o.prompt, *o.choices, o.explanation,
                                                 *o.why.values(), o.model_answer]))
            if abs(v - q.answer) <= q.tolerance + 1e-12]


@pytest.mark.parametrize("qid", sorted(q.id for q in BANK.values() if q.kind == "numeric"
                                       and not (float(q.answer).is_integer()
                                                and 1 <= q.answer <= 9)))
def test_no_question_shows_the_number_another_one_asks_for(qid):
    """Answer one question, read its explanation, type the number it gives into the next:
    no numeric answer is printed by another question of the same quiz. Answers from 1 to 9
    are left out: prompts count workers and ranks with these digits, and "8 ranks" cannot
    be told from "8 MiB" by machine (they were checked by hand)."""
    assert shown_beside(BANK[qid]) == [], f"{qid}: another question shows its answer"


def test_a_number_shown_beside_its_question_is_caught():
    leaky = dataclasses.replace(BANK["efficiency-definition"], explanation="$E = 0.75$ ...")
    bank = [leaky if q.id == leaky.id else q for q in BANK.values()]
    assert shown_beside(BANK["efficiency-from-times"], bank) == [0.75]
    assert 86400 in fairness.numbers("$M = 86{,}400$ s") and 0.16 in fairness.numbers("16%")


def single(prompt: str, choices: tuple[str, ...], answer: str = "a"):
    from workbench.quiz.bank import Question
    return Question(id=prompt, topic="metrics", kind="single", prompt=prompt, answer=answer,
                    explanation="", choices=choices)


def test_the_fairness_strategies_see_what_they_claim():
    q = single("Why do replicas synchronize?", (
        "They never do.", "So that the replicas synchronize their weights, usually.",
        "$a = b + c$", "Always, for every reason."), answer="b")
    scores = {name: credit(q) for name, credit in fairness.SINGLE.items()}
    assert scores == {
        "the 1st longest option": 1.0, "the 2nd longest option": 0.0,
        "the 3rd longest option": 0.0, "the 4th longest option": 0.0,
        "the fewest absolute words": 0.5, "the most hedged": 1.0,
        "the most words shared with the question": 1.0,
        "the most words shared with the other options": 0.25, "the most mathematics": 0.0,
        "the most words": 1.0, "the fewest words": 0.0,
        "the fewest words shared with the other options": 0.25,
        "a number of the prompt repeated": 0.25}
    assert fairness.absolute("It cannot fit.") and not fairness.absolute("It fits.")
    assert fairness.chance(q) == 0.25


def test_a_bank_that_gives_its_keys_away_fails_the_fairness_test():
    """The mutants a careless writer makes: each must show up as unfair."""
    longest = [single(f"q{i}", ("a long, careful and fully qualified right answer",
                                "short", "brief one", "tiny")) for i in range(10)]
    assert [r.strategy for r in fairness.unfair(longest)] == ["the 1st longest option",
                                                             "the most words"]
    hedged = [single(f"h{i}", ("It usually helps.", "It helps.", "It hurts.", "It waits."))
              for i in range(10)]
    assert "the most hedged" in {r.strategy for r in fairness.unfair(hedged)}
    from workbench.quiz.bank import Question
    in_prompt = [Question(id="n", topic="metrics", kind="numeric", answer=40.0,
                          prompt="An epoch takes 40 s on four GPUs. How long?",
                          explanation="")]
    assert [r.strategy for r in fairness.unfair(in_prompt)] == [
        "answer a number printed in the prompt"]
    plain = [Question(id=f"m{i}", topic="metrics", kind="multiple", prompt="Which?",
                      answer=["a", "b"], explanation="", choices=(
                          "It helps here.", "It helps there.", "It never helps.",
                          "It always helps.")) for i in range(5)]
    assert "tick all without an absolute word" in {
        r.strategy for r in fairness.unfair(plain)}


def multiple(qid: str, choices: tuple[str, ...], answer: list[str]):
    from workbench.quiz.bank import Question
    return Question(id=qid, topic="metrics", kind="multiple", prompt="Which are true?",
                    answer=answer, explanation="", choices=choices)


def test_a_bank_whose_statements_are_mostly_true_fails_the_fairness_test():
    """The bank as it was: 9 of 11 keys three statements true, most of them three of four,
    the false one the odd one out or the absolute one. A student who has seen that ticks
    three, or all but the odd one, and beats chance by far: 15-25% against 5%."""
    three_of_four = [multiple(f"m{i}", (
        "It helps the replicas agree.", "It helps the replicas stay in step.",
        "It helps the replicas agree on the weights.", "It never works with asynchronous SGD."),
        ["a", "b", "c"]) for i in range(5)]
    unfair = {r.strategy for r in fairness.unfair(three_of_four)}
    assert {"tick 3 at random", "tick all but the most absolute", "tick all but the odd one out",
            "tick the 3 with the fewest absolute words"} <= unfair, unfair
    sizes = [len(q.answer) for q in BANK.values() if q.kind == "multiple"]
    assert max(sizes.count(n) for n in set(sizes)) <= len(sizes) * 0.6, sizes


def test_the_usual_number_of_true_statements_is_the_banks():
    mixed = [multiple("x", ("a", "b", "c", "d"), ["a"]),
             multiple("y", ("a", "b", "c", "d"), ["a", "b"]),
             multiple("z", ("a", "b", "c", "d"), ["c", "d"])]
    assert fairness.usual_size(mixed) == 2
    credit = fairness.SIZED["tick n at random"]
    assert credit(mixed[1], 2) == pytest.approx(1 / 6) and credit(mixed[0], 2) == 0


@pytest.mark.parametrize("qid", sorted(q.id for q in BANK.values() if q.kind == "numeric"
                                       and not (float(q.answer).is_integer()
                                                and 1 <= q.answer <= 9)))
def test_no_question_of_the_bank_prints_a_numeric_answer_beside_its_words(qid):
    """The review quizzes the whole bank at once: no sentence anywhere in it that shares two
    words or more with a numeric question's prompt prints that question's answer (ZeRO-3's
    1.5 times the traffic was in an explanation of data parallelism and a model answer)."""
    q = BANK[qid]
    assert fairness.NUMERIC["answer a number printed beside the prompt's words"](
        q, BANK_ITEMS) == 0, f"{qid}: another question prints its answer beside its words"


def test_a_number_printed_beside_the_prompts_words_is_caught():
    q = BANK["zero3-traffic-ratio"]
    leaky = dataclasses.replace(BANK["data-parallel-properties"], explanation=(
        "ZeRO-3 all-gathers each block's parameters again, for 1.5 times the bytes sent."))
    assert fairness.NUMERIC["answer a number printed beside the prompt's words"](
        q, [q, leaky]) > 0


# --- written answers: what a test-wise student writes scores nothing ----------------------------

@pytest.mark.parametrize("qid", REVIEW_IDS)
def test_a_list_of_terms_or_pasted_course_text_scores_nothing_whatever_is_ticked(qid):
    """Wins before these rules, every box ticked: the bank's most frequent terms listed
    (0.4-1.0 of the points), the explanations of the topic's other questions pasted
    (0.6-1.0), an answer longer than any model answer made of the whole bank's explanations
    (0.8-1.0)."""
    q, bank, every = BANK[qid], list(BANK.values()), range(len(BANK[qid].rubric))
    for name, strategy in fairness.EXPLAIN.items():
        assert strategy(q, bank) == 0, name
    pasted = " ".join(o.explanation for o in bank if o.id != qid)
    assert grade(q, pasted, every).score == 0
    assert "keep it to 250" in grade(q, pasted, every).feedback
    listed = "Parallel split memory speedup faster, bandwidth straggler stale checkpoint."
    assert grade(q, listed, every).score == 0
    assert "in sentences" in grade(q, listed, every).feedback


def test_a_sentence_pasted_from_another_question_does_not_count_and_ones_own_does():
    q = BANK["review-synchronization"]
    every = range(len(q.rubric))
    pasted = BANK["communication-overhead"].choices[1]   # "Every step also spends time ..."
    own = "Each step ends with an exchange whose network time grows with the workers."
    assert fairness.words(pasted) and grade(q, pasted, every).score == 0
    g = grade(q, f"{pasted} {own}", every)
    assert g.score == pytest.approx(1 / len(q.rubric))
    assert "1 of your sentences repeat the course's text word for word" in g.feedback
    assert grade(q, q.model_answer, every).score == 1    # its own model answer is no copy


def test_a_written_answer_that_cannot_be_marked_is_not_committed(tmp_path, monkeypatch):
    """A list of terms is refused before anything is kept: the key stays hidden, and the
    student may write sentences instead."""
    monkeypatch.setenv("WORKBENCH_LEARNER_DIR", str(tmp_path))
    quiz = Quiz(ids=["review-efficiency"], seed="s")
    quiz.answer("review-efficiency", "parallel split memory speedup faster")
    g = quiz.check("review-efficiency")
    assert quiz.first_grade("review-efficiency") is None and "in sentences" in g.feedback
    assert "Model answer" not in g.feedback and not (tmp_path / "quiz-answers.json").exists()
    card = quiz.cards["review-efficiency"]                 # nor is any point named in the page
    assert all(box.description == "" for box in card.rubric), [b.description for b in card.rubric]
    assert card.rubric_box.layout.display == "none" and not card.input.disabled
    quiz.answer("review-efficiency", "The devices work in parallel, so it takes less time.")
    quiz.check("review-efficiency")
    assert quiz.first_grade("review-efficiency") is not None


def test_a_printed_question_shows_no_key():
    """``quiz.questions`` in a cell prints the questions: their keys stay out."""
    for q in BANK.values():
        shown = repr(q)
        assert "answer=" not in shown and "explanation=" not in shown, q.id
        assert all(text[:30] not in shown for text in q.why.values()), q.id


# --- each question in the lesson that teaches it, the review last ------------------------------

LESSONS = [p for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
LESSON_TEXT = {p.stem[3:]: "\n".join(c.source for c in nbformat.read(p, as_version=4).cells)
               for p in LESSONS}
#: The course's words for its concepts: a question that uses one relies on a lesson for it.
GLOSSARY = ("bubble", "micro-batch", "stale", "straggler", "bucket", "reduce-scatter",
            "all-gather", "loss scal", "weak scaling", "strong scaling", "serial fraction",
            "parameter server", "checkpoint", "elastic", "negotiat", "fusion", "overlap",
            "accumulat", "shard", "latency", "bandwidth", "tensor parallel", "pipeline",
            "learning rate", "warm-up", "global batch", "linear scaling", "batch normalization",
            "backup worker", "sparse", "exponent", "mantissa", "optimizer state", "barrier",
            "allreduce", "all-reduce", "speedup", "efficiency", "scalability", "recursive halving",
            "replica", "activation", "critical path")


def _norm(text: str, case: bool = False) -> str:
    """Spaces and hyphens alike; lower case unless `case` (ZeRO is not "zero")."""
    return re.sub(r"[\s\-–]+", " ", text if case else text.lower())


def terms(q) -> set[str]:
    """What a question relies on being taught: code, names written with capitals or digits
    (ZeRO-3, bf16, GPipe, DDP, Megatron mid-sentence) and the course's concept words."""
    keys = [] if q.kind not in ("single", "multiple") else (
        [q.answer] if q.kind == "single" else q.answer)
    text = re.sub(r"\$[^$]*\$", " ", " ".join([q.prompt, *(q.choice(k) for k in keys)]))
    found = set(re.findall(r"`([^`]+)`", text))
    words = re.findall(r"[\w][\w\-–.]*\w|\w", re.sub(r"`[^`]+`", " ", text))
    starts = {m.group(1) for m in re.finditer(r"(?:^|[.?!:\"]\s+)([\w\-–]+)", text)}
    for w in words:
        if re.match(r"\d[\d.,]*[-–]", w):          # 512-worker, 64-GPU: a number and a unit
            continue
        if (re.search(r"\d", w) and re.search(r"[A-Za-z]", w)) or re.search(r".[A-Z]", w) or (
                w[0].isupper() and w not in starts):
            found.add(w.rstrip("."))
    found |= {g for g in GLOSSARY if re.search(r"\b" + re.escape(_norm(g)), _norm(text))}
    return found - {"MB", "GB", "MiB", "GB/s", "Gbit/s"}


#: What the lessons up to each one say (the welcome's course table outlines, it teaches not).
KNOWN = {name: " ".join(list(LESSON_TEXT.values())[1:i + 1])
         for i, name in enumerate(LESSON_TEXT)}


def untaught(q, lesson: str) -> list[str]:
    """The terms of `q` that no lesson up to `lesson` (included) uses; a term written with
    capitals must appear as written."""
    known = {case: _norm(KNOWN[lesson], case) for case in (False, True)}
    return sorted(term for term in terms(q) if not re.search(
        r"(?<!\w)" + re.escape(_norm(term, term != term.lower())),
        known[term != term.lower()]))


def test_the_review_comes_after_every_lesson_it_reviews():
    names = list(LESSON_TEXT)
    assert names[-1] == "review" and names[0] == "welcome"
    for q in BANK.values():
        assert q.lesson in names, (q.id, q.lesson)
        assert names.index(q.lesson) < names.index("review") or q.id in REVIEW_IDS, q.id


def test_every_question_is_asked_by_the_lesson_that_teaches_it():
    for name, text in LESSON_TEXT.items():
        mine = {q.id for q in BANK.values() if q.lesson == name}
        cell = f'Quiz(lesson="{name}")'
        if name == "review":
            assert 'WRITTEN = ["review-efficiency", "review-synchronization", ' \
                   '"review-parallelism"]' in text and "Quiz(ids=WRITTEN)" in text
            assert "Quiz(topic=TOPIC, exclude=WRITTEN)" in text      # every other question
            topic = Quiz(topic="metrics", exclude=REVIEW_IDS)         # asked once, not twice
            assert not set(topic.cards) & set(REVIEW_IDS) and len(topic.cards) == len(
                [q for q in BANK.values() if q.topic == "metrics"]) - 1
            assert mine == set(REVIEW_IDS)
        else:
            assert (cell in text) == bool(mine), (name, len(mine))
            assert len(Quiz(lesson=name).cards) == len(mine) if mine else True
    cells = [c for p in LESSONS for c in nbformat.read(p, as_version=4).cells
             if 'Quiz(lesson="' in c.source]
    assert all(c.cell_type == "code" for c in cells)        # a real cell, not a fenced block


@pytest.mark.parametrize("qid", sorted(q for q in BANK if q not in REVIEW_IDS))
def test_no_question_asks_what_no_earlier_lesson_taught(qid):
    q = BANK[qid]
    assert untaught(q, q.lesson) == [], f"{qid} ({q.lesson}) uses untaught terms"


def test_a_question_placed_before_its_lesson_is_caught():
    assert untaught(BANK["bf16-loss-scaling"], "synchronization") == ["bf16", "exponent", "fp16"]
    assert "ZeRO" in untaught(BANK["zero1-what-is-sharded"], "sgd_from_scratch")
    assert "1F1B" in untaught(BANK["bubble-1f1b"], "data_parallelism_horovod")


def test_the_sheets_are_printed_from_the_command_line(capsys):
    from workbench.quiz.sheet import main
    main(["--answers", "--topic", "pipeline"])
    out = capsys.readouterr().out
    assert out.startswith("<!doctype html>") and "bubble-1f1b" in out and "Answer:" in out
    with pytest.raises(SystemExit):
        main(["--topic", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
