"""Notebook 09: review of the course, with the question bank as an interactive quiz.

It comes last: its quiz holds the questions of every lesson before it."""

from workbench.notebooks import code, md

NAME = "09_review.ipynb"

#: Every exercise notebook, in order, with the words its link shows. A new exercise adds
#: one line here (tests/test_lesson_facts.py checks that none is missing).
EXERCISES = (
    ("01_average_gradients", "average the gradients"),
    ("02_shard_a_dataset", "shard a dataset"),
    ("03_speedup_and_efficiency", "speedup and efficiency"),
    ("04_ring_allreduce", "ring allreduce"),
    ("05_pipeline_bubble", "pipeline bubble"),
    ("06_data_or_model_parallelism", "data or model parallelism"),
    ("07_review_questions", "review questions"),
    ("08_staleness", "staleness of asynchronous gradients"),
    ("09_linear_scaling_rule", "the linear scaling rule, with a warm-up"),
    ("10_amdahl_or_gustafson", "Amdahl or Gustafson"),
    ("11_make_this_loop_data_parallel", "make this loop data-parallel"),
    ("12_zero1_optimizer_step", "the ZeRO-1 optimizer step"),
    ("13_overlap_the_all_reduce", "overlap the all-reduce with backward"),
)
EXERCISE_LIST = "\n".join(f"   - [{n[:2]} · {words}](exercises/{n}.ipynb)"
                           for n, words in EXERCISES)

CELLS = [
    md(r"""
# 09 · Review

**Goals.** After this notebook you can
- explain in a few sentences how distributed training saves time, what it costs, and how
  data and model parallelism differ,
- answer questions on every part of the course, and see where to look again when an answer
  is wrong.

**Time:** about 45 minutes (you can do one topic at a time).
"""),
    md(r"""
## The course on one page

1. **Why distribute.** Several devices compute at the same time, so the same training takes
   less wall-clock time, and datasets or models too large for one device's memory can be
   spread over several. The aim is the same accuracy, reached sooner (notebooks 01, 02).
2. **Two ways to split.** Data parallelism replicates the model and splits the data; the
   gradients are averaged with an allreduce every step. Model parallelism splits the model
   and sends activations across the cuts; pipelining with micro-batches reduces its bubble to
   $(P-1)/(M+P-1)$ (notebooks 02, 05).
3. **Synchronization is the price.** Synchronous SGD keeps the replicas consistent but
   waits for the slowest worker and pays for every exchange; asynchronous SGD never waits but
   applies stale gradients. Ring allreduce, overlap with the backward pass, tensor fusion,
   backup workers and staleness-aware learning rates reduce the price (notebooks 03, 04).
4. **Frameworks do the plumbing.** Horovod (TensorFlow, PyTorch, Keras, MXNet), PyTorch DDP
   and TensorFlow's `tf.distribute` add data parallelism to a training script in a few lines
   (notebook 02).
5. **Measure it.** Speedup $T_1/T_p$, efficiency $S/p$, scalability: efficiency as $p$ grows.
   Amdahl, Gustafson and Karp–Flatt explain the curves; cost models predict them (notebook 06).
6. **When the model does not fit.** ZeRO-1, 2 and 3 (FSDP) shard the optimizer state, then
   the gradients, then the parameters over the data-parallel ranks, for the same arithmetic
   (notebook 07); Megatron splits each layer's matrices over the GPUs of a server, with two
   all-reduces of the activations per block; buckets, overlap and gradient accumulation cut
   what data parallelism's communication costs (notebook 08).

| formula | meaning |
| --- | --- |
| $\nabla L_B = \frac1N \sum_k \nabla L_{B_k}$ | mean of shard gradients = global batch's gradient |
| $w \leftarrow w - \eta\, g(w_{t-\tau})$ | an asynchronous update with staleness $\tau$ |
| $2(p-1)\alpha + 2\frac{p-1}{p} n\beta$ | time of a ring allreduce of $n$ bytes |
| $2pn$ | bytes on a single parameter server's link per step |
| $(P-1)/(M+P-1)$ | pipeline bubble, $P$ stages, $M$ micro-batches (idle share of the run) |
| $1/(s_A + (1-s_A)/p)$ | Amdahl; $s_A$ the serial share of the one-worker time |
| $s_G + (1-s_G)\,p$ | Gustafson; $s_G$ the serial share of the $p$-worker time |
| $(1/S - 1/p)/(1 - 1/p)$ | Karp–Flatt serial fraction (strong scaling) |
| $(2 + 2 + K)\Psi/N$ | ZeRO-3's model states per rank, mixed precision, $N$ ranks |
"""),
    md(r"""
## 1. Three questions to answer in writing

Write your answer in the box, then press **Check**: that commits it, and the model answer
appears with its rubric. Tick the points your answer made: a ticked point counts when your
answer uses one of its key terms (the feedback lists them), so an empty answer scores
nothing. Compare your wording with the model answer; **Try again** lets you write it again
for practice, and the first answer stays the one scored.
"""),
    code(r"""
from workbench.quiz import TOPICS, Quiz

WRITTEN = ["review-efficiency", "review-synchronization", "review-parallelism"]
Quiz(ids=WRITTEN)
"""),
    md(r"""
## 2. Practise by topic

The question bank covers every notebook: definitions, calculations (type a number) and
choices (one or several answers). Each lesson's last cell held its own questions; here they
come by topic, across lessons. The first **Check** of each question is scored and
explained, right or wrong, wherever you give it: a question you answered in a lesson shows
that first grade here, and your first answers are kept in your home, so running a cell again
or restarting the kernel changes none of them. Pick a topic, or
leave `TOPIC = None` for every question (the three written ones above are left out).
"""),
    code(r"""
for key, title in TOPICS.items():
    print(f"{key:18s} {title}")
"""),
    code(r"""
TOPIC = "metrics"   # one of the keys above, or None for the whole bank

quiz = Quiz(topic=TOPIC, exclude=WRITTEN)
quiz
"""),
    md(r"""
When you are done, this shows your score:
"""),
    code(r"""
print(quiz.summary())
"""),
    md(r"""
## Summary

- Distributed training trades communication and waiting for parallel computation and more
  memory; speedup and efficiency measure the deal.
- Data parallelism is the default; for models that do not fit on one device, shard it
  (ZeRO-3, FSDP) or cut the model (pipeline and tensor parallelism), which also pays where
  the gradients are much larger than the activations.
- Synchronous training is consistent but waits; asynchronous training does not wait but is
  stale.

## Exercises

1. [Review questions](exercises/07_review_questions.ipynb): the same bank, also as a sheet
   that works without a kernel, to answer and hand in.
2. Every exercise of the course, with worked solutions in [`solutions/`](solutions/):
""" + EXERCISE_LIST + r"""

## Check yourself

1. Could you explain to a classmate, without notes, why 4 workers with batch 32 train like
   one worker with batch 128?
2. Could you sketch the reduce-scatter and allgather phases of a ring allreduce with 3
   workers?
3. Given a model's parameter count, its compute time per step and the link bandwidth, could
   you estimate its efficiency on 64 workers?

If not, notebooks 02, 03, 04 and 06 are the places to look again; for models that do not
fit on one device, notebooks 05, 07 and 08.
"""),
]
