"""Exercise 7: the review questions, as a quiz."""

from workbench.notebooks import Task, code, md

NAME = "07_review_questions.ipynb"

CELLS = [
    md(r"""
# Review questions

**Goals.** Check your understanding of the whole course: speedup and efficiency, data and
model parallelism, synchronous and asynchronous SGD, communication costs, and the cost
models of allreduce, parameter servers and pipelines.

**Time:** about 30 minutes (you can do one topic at a time).
"""),
    md(r"""
Choose an answer and press **Check**: your first answer to each question is the one
scored, and only then are the answer and its explanation shown. **Try again** lets you
practise; it does not change the score. Your first answers are kept in your home, the same
in every lesson's quiz and the review: running a cell again does not reset them. For the
three written questions, compare your text with the model answer and tick the rubric points
you made: a point counts when your answer uses one of its key terms. To practise one
topic, use for example `Quiz(topic="pipeline")`; the topics are listed below.
"""),
    code(r"""
from workbench.quiz import TOPICS, Quiz

print(", ".join(TOPICS))
quiz = Quiz()
"""),
    Task(exercise="quiz", solution="quiz.reveal()\nquiz"),
    md(r"""
Without a running kernel (for example in a page rendered from this notebook) the same
questions come as a sheet to answer: no answer is in the page, since anything in a page can
be read from its source. **Show my answers** lists yours, to hand in; your teacher marks them
with the answer sheet (`python -m workbench.quiz.sheet --answers > answers.html`).
"""),
    code(r"""
from IPython.display import HTML

from workbench.quiz import quiz_html

HTML(quiz_html(topic="metrics"))
"""),
    md(r"""
## Summary

- Speedup $T_1/T_p$, efficiency $S/p$, scalability $E(p)$ as $p$ grows; accuracy does not
  depend on the platform, speed does (as long as the training recipe is the same:
  asynchronous SGD and very large batches change what is learned).
- Data parallelism replicates the model and exchanges gradients; model parallelism splits
  the model and exchanges activations.
- Synchronous SGD waits for everyone; asynchronous SGD never waits but uses stale gradients.
- Cost models tell you what to expect before you measure: the ring allreduce, the parameter
  server, Amdahl, Gustafson, Karp–Flatt and the pipeline bubble.
"""),
]
