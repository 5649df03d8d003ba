"""The review question bank and its widget: the bank is complete and right (its numbers are
recomputed with the course's own formulas), grading explains every answer, and the widget
scores, explains and resets when driven headlessly."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import ipywidgets as widgets
import pytest
import yaml

from workbench.model_parallel.schedule import idle_fraction
from workbench.quiz import TOPICS, BankError, Quiz, fairness, grade, load_bank, quiz_html
from workbench.quiz.bank import BANK_PATH, learner_seed, mentions, parse_number, shuffled
from workbench.quiz.widget import PARSE_NUMBER_JS
from workbench.scaling import costmodel, metrics
from workbench.sharded import costmodel as sharded
from workbench.synchronization.checkpoint_interval import young_interval
from workbench.tensor_parallel import traffic

BANK = {q.id: q for q in load_bank()}


@pytest.fixture(autouse=True)
def _learner_home(monkeypatch, tmp_path):
    """Each test's learner keeps their id in a home of their own, not the runner's."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
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
    "efficiency-from-times": metrics.efficiency(metrics.speedup(120, 40), 4),
    "efficiency-from-throughput": metrics.efficiency(
        metrics.speedup_from_throughput(1640, 1000), 2),
    "amdahl-value": metrics.amdahl(8, 0.9),
    "amdahl-limit": metrics.amdahl(1e12, 0.95),
    "gustafson-value": metrics.gustafson(8, 0.9),
    "karp-flatt-value": metrics.karp_flatt(3, 4),
    "ring-time": costmodel.ring_allreduce_time(400e6, 5, 0.0, 1 / 1e9),
    "ring-bytes-per-worker": costmodel.ring_allreduce_time(100, 4, 0.0, 1.0),  # MB at β = 1
    "ring-messages": costmodel.ring_allreduce_time(1, 8, 1.0, 0.0),          # count of α
    "bus-bandwidth": costmodel.busbw(1e8, 0.5, 4) / 1e9,
    "parameter-server-traffic": costmodel.parameter_server_time(100, 8, 0.0, 1.0),
    "bubble-value": idle_fraction(4, 8),
    "bubble-at-4p": idle_fraction(4, 16),
    "consistency-update": 1.0 - 0.1 * (2 + 4) / 2,
    "training-memory": 2e9 * 16 / 1e9,
    "global-batch": 8 * 32,
    "linear-scaling-rule": 0.1 * 1024 / 256,
    "staleness-value": 13 - 10,
    "staleness-learning-rate": 0.12 / 4,
    "faults-young-interval": young_interval(60, 86_400) / 60,
    "parameter-server-sharded-traffic": costmodel.parameter_server_time(100, 8, 0.0, 1.0,
                                                                        servers=4),
    "tensor-parallel-bytes": traffic.block_bytes_per_step(512, 1024, 2) / 2**20,
    "accumulation-traffic": 400 * 1024 / (8 * 4 * 32),   # one all-reduce per N·k·b samples
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
    assert grade(q, ["c", "b", "a"]).correct
    g = grade(q, ["a", "d"])
    assert not g.correct
    assert "(d) is false. Sharded data parallelism (ZeRO-3, FSDP) is still" in g.feedback
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


#: Answers a student might type, read by the widget (Python) and by the HTML page (JS).
TYPED = ["0.75", "0,75", "3/4", "75%", " 75 % ", "1,600", "12,000.5", "1e3", "-3/4", ".5",
         "5.", "1/0", "abc", "", "1.5/3", "inf", "0,750", "3/4%", "1,60"]


def test_html_script_reads_numbers_as_the_widget_does():
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs Node.js to run the HTML quiz's script: apt-get install -y nodejs")
    script = (f"const f = {PARSE_NUMBER_JS};\n"
              f"const xs = {json.dumps(TYPED)};\n"
              "console.log(JSON.stringify(xs.map(x => { const v = f(x); "
              "return Number.isNaN(v) ? null : v; })));")
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    in_page = json.loads(out)
    in_widget = [parse_number(x) for x in TYPED]
    assert in_page == pytest.approx(in_widget), list(zip(TYPED, in_page, in_widget, strict=True))
    assert in_page[TYPED.index("75%")] == 0.75 and in_page[TYPED.index("1,600")] == 1600


def test_keywords_match_at_the_start_of_words_only():
    assert not mentions("a clear benefit", "fit") and mentions("it fits in memory", "fit")
    assert mentions("they synchronize", "synchroni") and not mentions("asynchronous", "synchroni")
    q = BANK["review-efficiency"]
    hints = grade(q, "Several devices compute in parallel, a clear benefit.").hints
    assert "Memory" in hints and "Parallel computation" not in hints


def test_explain_scores_ticked_rubric_points_and_names_missing_ones():
    q = BANK["review-parallelism"]
    text = "Data parallelism keeps a replica on every device, so the model must fit in memory."
    g = grade(q, text, covered=[0, 1])
    assert g.score == pytest.approx(2 / len(q.rubric)) and not g.correct
    assert "Model answer: Data parallelism trains the same model" in g.feedback
    assert "Model parallelism: limits" in g.hints and "Data parallelism: limits" not in g.hints
    full = grade(q, q.model_answer, covered=range(len(q.rubric)))
    assert full.correct and full.score == 1 and not full.hints
    assert "Write your answer in the box first" in grade(q, "").feedback


def test_the_model_answers_make_their_own_rubric_points():
    for qid in REVIEW_IDS:
        q = BANK[qid]
        assert grade(q, q.model_answer).hints == (), qid


# --- the widget -------------------------------------------------------------------------------

def test_quiz_widget_scores_explains_and_lets_the_student_retry():
    ids = ["speedup-from-times", "speedup-definition", "frameworks", "review-efficiency"]
    quiz = Quiz(ids=ids, shuffle=False)
    assert quiz.summary() == "Score: 0 / 4 (0 of 4 questions checked)"
    assert isinstance(quiz.cards["speedup-from-times"].prompt, widgets.HTMLMath)

    quiz.answer("speedup-from-times", "3")
    assert quiz.check("speedup-from-times").correct
    quiz.answer("speedup-definition", "c")
    assert not quiz.check("speedup-definition").correct
    assert "efficiency, not the speedup" in quiz.feedback("speedup-definition")
    quiz.answer("frameworks", ["a", "b", "c", "d"])
    quiz.check("frameworks")
    quiz.answer("review-efficiency", "Devices work in parallel.", covered=[0, 3])
    quiz.check("review-efficiency")
    assert quiz.score == pytest.approx(2.4)
    assert "Score: 2.4 / 4 (4 of 4 questions checked)" in quiz.score_label.value

    # the feedback shown in the page is typeset maths inside HTML
    shown = quiz.cards["speedup-definition"].output.value
    assert "$T_1 / T_p$" in shown and "#c62828" in shown

    # ticking another rubric point re-scores the explanation at once
    quiz.cards["review-efficiency"].rubric[1].value = True
    assert quiz.score == pytest.approx(2.6)

    quiz.retry("speedup-definition")
    assert quiz.feedback("speedup-definition") == ""
    assert quiz.cards["speedup-definition"].input.value is None
    quiz.answer("speedup-definition", "b")
    assert quiz.check("speedup-definition").correct
    assert quiz.score == pytest.approx(3.6)

    quiz.retry()
    assert quiz.score == 0 and quiz.checked == 0


def test_quiz_by_topic_reveal_and_bad_ids():
    quiz = Quiz(topic="pipeline")
    assert len(quiz.cards) == len(load_bank(topic="pipeline"))
    assert quiz.reveal() == len(quiz.cards)
    assert all(quiz.feedback(q.id).startswith("Correct.") for q in quiz.questions)
    with pytest.raises(KeyError, match="no question with id 'nope'"):
        Quiz(ids=["nope"])
    with pytest.raises(KeyError, match="this quiz has no question 'x'"):
        quiz.check("x")


def test_whole_bank_revealed_scores_full_marks():
    quiz = Quiz()
    assert quiz.reveal() == len(BANK)


def test_kernel_free_html_has_a_reveal_and_an_answer_per_question():
    page = quiz_html(topic="metrics", shuffle=False)
    questions = load_bank(topic="metrics")
    assert page.count("<details>") == len(questions)
    assert "data-kind='single' data-answer='b'" in page       # speedup-definition
    assert "data-kind='numeric' data-answer='3.0' data-tolerance='0.01'" in page
    assert "Model answer:" in page and "onclick=" in page
    assert "<script" not in page      # inline handlers only, nothing to evaluate on load


# --- fair to every learner: no key learned by position -------------------------------------------

CHOICE_QUESTIONS = [q for q in BANK.values() if q.kind in ("single", "multiple")]
SEEDS = ["ada", "grace", "alan", "barbara", "edsger", "learner", 0, 1, 2, 3]


def first_option_score(questions) -> float:
    """The share of choice questions answered right by always ticking the first option."""
    return sum(q.answer in ("a", ["a"]) for q in questions) / len(questions)


def html_keys(page: str) -> list[str]:
    """The answer of every choice question in a kernel-free page, in its shown letters."""
    return re.findall(r"data-kind='(?:single|multiple)' data-answer='([a-z,]+)'", page)


def test_no_key_letter_holds_more_than_40_percent_of_single_choice_questions():
    singles = [q.answer for q in BANK.values() if q.kind == "single"]
    for letter in "abcd":
        assert singles.count(letter) / len(singles) <= 0.40, (letter, singles.count(letter))
    assert len({tuple(q.answer) for q in BANK.values() if q.kind == "multiple"}) > 1


def test_always_picking_the_first_option_scores_under_40_percent_in_every_order():
    assert first_option_score(CHOICE_QUESTIONS) < 0.40          # the bank's own order
    for seed in SEEDS:
        widget = Quiz(seed=seed)                                    # the widget's order
        assert first_option_score([q for q in widget.questions
                                   if q.kind in ("single", "multiple")]) < 0.40, seed
        keys = html_keys(quiz_html(seed=seed))                      # the HTML page's order
        assert len(keys) == len(CHOICE_QUESTIONS)
        assert sum(k == "a" for k in keys) / len(keys) < 0.40, seed


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
    page = quiz_html(questions=[q], seed="ada")
    shown = re.findall(r"value='([a-z])'> \(\1\) ([^<]+)</label>", page)
    assert [text for _, text in shown] == [html.escape(c) for c in mine.choices]
    assert f"data-answer='{mine.answer}'" in page

    quiz.answer("sync-sgd", mine.answer)
    assert quiz.check("sync-sgd").correct
    wrong = next(x for x in mine.letters if x != mine.answer)
    quiz.answer("sync-sgd", wrong)
    g = quiz.check("sync-sgd")
    assert not g.correct and f"the answer is ({mine.answer})" in g.feedback
    assert f"About ({wrong}): {mine.why[wrong]}" in g.feedback


def test_the_learner_is_who_jupyterhub_says_with_an_id_kept_in_their_home(monkeypatch,
                                                                           tmp_path):
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
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

def test_no_knowledge_free_strategy_passes_the_quiz():
    """Over the whole bank, items appended later included (their scores are printed)."""
    questions = list(BANK.values())
    print("\n" + fairness.report(questions))
    for name, share in fairness.single_scores(questions).items():
        assert share <= 0.40, (name, share)
    multi = fairness.multiple_scores(questions)
    counts = fairness.false_counts(questions)
    # "all but one at random" is right 1/n of the time where exactly one option is false
    chance = sum(1 / len(q.choices) for q in questions
                 if q.kind == "multiple" and len(q.choices) - len(q.answer) == 1) / len(counts)
    assert multi["tick all but the shortest"] <= max(chance, 1 / len(counts)), multi
    assert max(multi.values()) <= 0.25, multi
    assert len(set(counts)) >= 2 and counts.count(1) <= 0.6 * len(counts), counts
    right, wrong = fairness.absolute_rates(questions)
    assert abs(right - wrong) <= 0.10, (right, wrong)


def test_the_fairness_strategies_see_what_they_claim():
    from workbench.quiz.bank import Question
    q = Question(id="x", topic="metrics", kind="single", prompt="Why do replicas synchronize?",
                 answer="b", explanation="", choices=(
                     "They never do.", "So that the replicas synchronize their weights.",
                     "$a = b + c$", "Always, for every reason."))
    assert fairness.single_scores([q]) == {
        "longest option": 1.0, "shortest option": 0.0, "most mathematics": 0.0,
        "most words shared with the question": 1.0, "avoid absolute words": 0.5}
    assert fairness.absolute("It cannot fit.") and not fairness.absolute("It fits.")


def test_a_shuffled_quiz_revealed_still_scores_full_marks():
    quiz = Quiz(topic="frameworks", seed="grace")
    assert quiz.reveal() == len(quiz.cards)
