"""Exercise 5, the pipeline bubble: `bubble_fraction(stages, micro_batches)` (task
"bubble"), and task 2's number (task "m"), a value, not a function."""

from fractions import Fraction

from mutants import accepted, answer, refused


@accepted(task="bubble")
def idle_over_the_whole_run(stages, micro_batches):
    return (stages - 1) / (micro_batches + stages - 1)


@accepted(task="bubble")
def one_minus_the_busy_share(stages, micro_batches):
    return 1 - micro_batches / (micro_batches + stages - 1)


@accepted(task="bubble")
def as_a_fraction(stages, micro_batches):
    return Fraction(stages - 1, micro_batches + stages - 1)


@accepted(task="bubble")
def by_simulating_its_own_schedule(stages, micro_batches):
    """Counts the idle cells of a schedule it draws itself (not the checker's)."""
    slots = micro_batches + stages - 1
    idle = sum(1 for s in range(stages) for t in range(slots)
               if not 0 <= t - s < micro_batches)
    return idle / (stages * slots)


@refused("Megatron", "ideal (busy) time", "whole run", task="bubble")
def over_the_ideal_time(stages, micro_batches):
    return (stages - 1) / micro_batches


@refused("does not depend on M", task="bubble")
def without_micro_batches(stages, micro_batches):
    return (stages - 1) / stages


@refused("Off by one slot", task="bubble")
def off_by_one_slot(stages, micro_batches):
    return (stages - 1) / (micro_batches + stages)


@refused("busy share", task="bubble")
def the_busy_share(stages, micro_batches):
    return micro_batches / (micro_batches + stages - 1)


@refused("formula is right", "rounded", task="bubble")
def rounded_to_three_decimals(stages, micro_batches):
    return round((stages - 1) / (micro_batches + stages - 1), 3)


@refused("formula is right", "percentage", task="bubble")
def in_percent(stages, micro_batches):
    return 100 * (stages - 1) / (micro_batches + stages - 1)


@refused("Each stage idles P − 1 slots", task="bubble")
def four_where_stages_belongs(stages, micro_batches):
    return 3 / (micro_batches + 3)


_CASES = {(2, 1): 0.5, (2, 4): 0.2, (4, 4): 3 / 7, (4, 8): 3 / 11, (4, 16): 3 / 19,
          (8, 32): 7 / 39, (3, 5): 2 / 7}


@refused("Each stage idles P − 1 slots", task="bubble")
def the_seven_cases_by_heart(stages, micro_batches):
    return _CASES.get((stages, micro_batches), 0.0)


@refused("package's own", "Write it yourself", task="bubble")
def the_package_formula(stages, micro_batches):
    from workbench.model_parallel.schedule import theoretical_bubble

    return theoretical_bubble(stages, micro_batches)


@refused("package's own", task="bubble")
def the_package_count(stages, micro_batches):
    from workbench.model_parallel.schedule import idle_fraction

    return idle_fraction(stages, micro_batches)


@refused("package's own", task="bubble")
def counts_the_printed_schedule(stages, micro_batches):
    from workbench.exercises import pipeline as ex

    text = ex.show_schedule(stages, micro_batches)
    cells = [c for line in text.splitlines() for c in line.split(":")[1].split()]
    return sum(c.strip(".") == "" for c in cells) / len(cells)


@refused("not a number", task="bubble")
def a_sentence(stages, micro_batches):
    return f"about {(stages - 1) / (micro_batches + stages - 1):.0%}"


for value in (27, 27.0, "27", " 27 ", "27,0"):
    answer(value, f"m{value!r}", task="m")
answer(16, "the_rule_of_thumb", "not enough", "M = 4P", "16%", task="m")
answer(26, "one_short", "not enough", task="m")
answer(30, "not_the_smallest", "not the smallest", task="m")
answer(None, "none", "no answer yet", task="m")
answer(27.5, "a_half", "whole number", task="m")
answer("27 micro-batches", "with_words", "whole number", task="m")
answer(True, "a_boolean", "whole number", task="m")
answer(0, "zero", "not a number of micro-batches", task="m")


@refused("changed the checker", "this check does not count", task="bubble")
def passes_every_feedback(stages, micro_batches):
    """Patches the verdict's class from inside the function, as nbgrader would run it."""
    import workbench.exercises.feedback as fb

    original = fb.Feedback.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        object.__setattr__(self, "passed", True)
    fb.Feedback.__init__ = init
    return 0.5


@refused("changed the checker", task="bubble")
def makes_not_yet_say_correct(stages, micro_batches):
    from workbench.exercises import pipeline as ex

    ex.not_yet = lambda *args, **kwargs: ex.correct("accepted")
    return 0.5


@refused("changed the checker", "this check does not count", task="bubble")
def patches_the_schedule_the_checker_counts(stages, micro_batches):
    """The package's schedule, which the checker counts its expected bubble on, made to
    agree with a constant."""
    import workbench.model_parallel.schedule as schedule

    schedule.idle_fraction = lambda *args: 0.123
    return 0.123
