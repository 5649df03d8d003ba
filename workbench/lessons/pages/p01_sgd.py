"""Notebook 01: stochastic gradient descent from scratch, on one worker."""

from workbench.notebooks import code, md

NAME = "01_sgd_from_scratch.ipynb"

CELLS = [
    md(r"""
# 01 · SGD from scratch: one worker first

**Goals.** After this notebook you can
- write the gradient-descent update and say what each symbol means,
- explain why mini-batches give a *noisy* but *unbiased* estimate of the gradient, and how
  the noise shrinks with the batch size,
- recognise a learning rate that is too small or too large from a loss curve,
- state the linear learning-rate scaling rule and why distributed training needs it,
- say what state SGD with momentum and Adam keep for every parameter.

**Time:** about 30 minutes.
"""),
    md(r"""
## Why start with one worker?

Every distributed training method in this course is SGD spread over several workers. To
judge whether a distributed run is *correct* (does it learn the same thing?) and *fast* (how
much sooner does it finish?) we need the one-worker baseline first.

Training minimises the average loss over the $n$ training samples,

$$L(w) = \frac{1}{n} \sum_{i=1}^{n} \ell(w; x_i, y_i),$$

where $w$ are the model's parameters and $\ell$ measures how wrong the prediction for
sample $i$ is. **Gradient descent** repeats one update,

$$w \leftarrow w - \eta \, \nabla L(w),$$

a small step of size $\eta$ (the **learning rate**) against the gradient, the direction in
which the loss grows fastest.

Our data: scikit-learn's 1,797 handwritten digits, 8×8 pixels each (64 features,
standardised), in 10 classes. Our model: **softmax regression**, one linear layer
$z = xW + b$ with 650 parameters, trained with the cross-entropy loss
$\ell = -\log \mathrm{softmax}(z)_y$.
"""),
    code(r"""
import inspect

import torch

from workbench.lessons import sgd
from workbench.lessons.show import curves, table
from workbench.ui import charts

torch.set_num_threads(1)  # a tiny model: one thread is fastest and leaves a core free
charts.load_bokehjs()

data = sgd.digits()
print(f"{len(data)} samples, {data.x.shape[1]} features, {data.n_classes} classes")
"""),
    md(r"""
## 1. One step of gradient descent, written out

PyTorch's autograd computes $\nabla L$ for us (`loss.backward()` fills `p.grad` for every
parameter `p`); the update itself is one line:
"""),
    code(r"""
print(inspect.getsource(sgd.sgd_step))
"""),
    md(r"""
With the *whole* dataset as the batch this is plain (full-batch) gradient descent. Twenty
steps:
"""),
    code(r"""
model = sgd.logreg(seed=0)
for step in range(1, 21):
    loss = sgd.sgd_step(model, data.x, data.y, lr=0.5)
    if step % 5 == 0:
        print(f"step {step:2d}: loss {loss:.3f}")
"""),
    md(r"""
## 2. Mini-batches: cheaper steps, noisier directions

Each full-batch step costs a forward and backward pass over all $n$ samples. **Stochastic**
gradient descent uses a random *mini-batch* $B$ of $|B| = b$ samples instead:

$$g_B = \frac{1}{b} \sum_{i \in B} \nabla \ell(w; x_i, y_i).$$

Because the batch is random, $g_B$ is right *on average*, $\mathbb{E}[g_B] = \nabla L(w)$
(unbiased), but each single $g_B$ is off by some noise. One pass over the data, an
**epoch**, is $n/b$ steps. Here is the whole training loop:
"""),
    code(r"""
print(inspect.getsource(sgd.minibatch_sgd))
"""),
    md(r"""
### Experiment 1: the batch size

The same learning rate, one epoch, three batch sizes. The first chart counts **steps**
(updates of the model), the second counts **samples seen** (work done).
"""),
    code(r"""
EPOCHS = 1                  # more epochs: longer curves
BATCH_SIZES = [4, 32, 256]  # try adding 1 (slow: 1,797 steps per epoch) or 1024
LR = 0.1

runs = {f"b = {b}": sgd.minibatch_sgd(b, LR, EPOCHS) for b in BATCH_SIZES}
curves("Loss per step", "steps (log scale)", "loss on all samples",
       {k: (r["step"][1:], r["loss"][1:]) for k, r in runs.items()}, log_x=True)
"""),
    code(r"""
curves("Loss per sample seen", "samples seen", "loss on all samples",
       {k: (r["samples"], r["loss"]) for k, r in runs.items()})
"""),
    md(r"""
**What to notice.**

- *Per step*, the curves start out together: far from the minimum even a small batch points
  downhill, and the learning rate sets how far a step goes. Nearer the minimum the small
  batch's curve wiggles: its gradient noise is now as large as the gradient itself. Larger
  batches give cleaner steps.
- *Per sample seen*, small batches learn more: they update the model more often for the
  same work. With one worker, small batches are usually the better deal.
- But a step on 256 samples does not cost 256 times a step on one sample: the matrix
  operations run on many samples at once, and every step has fixed costs. And with **data
  parallelism** (notebook 02), $N$ workers each compute the gradient of $b$ samples *at the
  same time*: one step then processes a *global batch* of $N \cdot b$ samples in about the
  time of $b$. Distributed training is a way of making large batches cheap.

### How noisy is a mini-batch gradient?

For independent samples the expected squared error of a batch gradient is
$\mathbb{E}\,\lVert g_B - \nabla L \rVert^2 = \sigma^2 / b$, where $\sigma^2$ is the variance
of one sample's gradient: four times the batch, half the typical error. We measure it at the
initial weights, over 50 random batches of each size:
"""),
    code(r"""
noise = sgd.gradient_noise([1, 4, 16, 64, 256, 1024], trials=50)
sigma2 = sum(r["noise"] * r["batch_size"] for r in noise) / len(noise)  # σ² = b × noise
curves("Gradient noise", "batch size b (log)", "mean ‖g_B − ∇L‖² (log)",
       {"measured": ([r["batch_size"] for r in noise], [r["noise"] for r in noise])},
       log_x=True, log_y=True, markers=True,
       reference=([1, 1024], [sigma2, sigma2 / 1024], "σ² / b"))
"""),
    md(r"""
The measured points follow the line $\sigma^2/b$: the noise of SGD is a matter of batch size.

### Experiment 2: the learning rate

The same batch size, four learning rates. The loss axis is logarithmic.
"""),
    code(r"""
LEARNING_RATES = [0.01, 0.1, 1.0, 30.0]
BATCH = 32

runs = {f"η = {lr}": sgd.minibatch_sgd(BATCH, lr, EPOCHS) for lr in LEARNING_RATES}
curves("Loss for four learning rates", "step", "loss on all samples (log)",
       {k: (r["step"], r["loss"]) for k, r in runs.items()}, log_y=True)
"""),
    md(r"""
- **Too small** ($\eta = 0.01$): every step goes downhill, but so slowly that one epoch is
  not enough.
- **About right** ($\eta$ = 0.1 to 1): fast progress.
- **Too large** ($\eta = 30$): each step overshoots the valley it should descend into; the
  loss jumps up and down and stays high. On a quadratic bowl, gradient descent diverges once
  $\eta$ exceeds $2/\lambda_{\max}$, with $\lambda_{\max}$ the largest curvature.

## 3. Larger batches need larger learning rates

When data parallelism multiplies the batch by $k$, the model makes $k$ times fewer updates
per epoch. Goyal et al. (2017, "Accurate, Large Minibatch SGD", arXiv:1706.02677) showed
that the **linear scaling rule** recovers the lost progress: *multiply the learning rate by
$k$ too*. The reason: $k$ small steps of size $\eta$ on nearly the same weights add up to
about one step of size $k\eta$ on the average gradient of the $k$ batches, which is the
large batch's gradient. The approximation fails at the very start of training, when the
weights change fast; they therefore *warm up*, raising the learning rate linearly from $\eta$
to $k\eta$ over the first 5 epochs (their "gradual warmup"). With both, they trained ResNet-50
on ImageNet with batches of up to 8,192 images and no loss of accuracy.
"""),
    code(r"""
SMALL, K = 32, 8   # batch 32, then 8 times larger

rows = []
for batch, lr in [(SMALL, LR), (K * SMALL, LR), (K * SMALL, K * LR)]:
    run = sgd.minibatch_sgd(batch, lr, EPOCHS)
    rows.append({"batch": batch, "lr": lr, "steps": run["step"][-1], "loss": run["loss"][-1]})
table(rows, [("batch", "batch", "d"), ("lr", "learning rate", "g"), ("steps", "steps", "d"),
             ("loss", "final loss", ".3f")])
"""),
    md(r"""
With the learning rate scaled by 8, the large batch ends close to the small batch's loss
after the same epoch, in 8 times fewer steps. On 8 workers, each of those steps would take
about the time of one small step.

## 4. Momentum and Adam: what an optimizer keeps

Plain SGD keeps nothing between steps but the weights. Two common optimizers keep more, for
every parameter:

- **SGD with momentum** keeps a velocity, a running sum of past gradients,
  $v \leftarrow \mu v + g$, and steps $w \leftarrow w - \eta v$ (PyTorch's form): one more
  number per parameter.
- **Adam** (Kingma & Ba, ICLR 2015) keeps running averages of the gradient and of its
  square, its first and second *moments*, $m \leftarrow \beta_1 m + (1-\beta_1) g$ and
  $v \leftarrow \beta_2 v + (1-\beta_2) g^2$, and steps
  $w \leftarrow w - \eta\, \hat m / (\sqrt{\hat v} + \epsilon)$, where $\hat m$ and $\hat v$
  correct for their start at zero. Dividing by $\sqrt{\hat v}$ makes each step about $\eta$
  long whatever the gradient's scale. Two more numbers per parameter.

That state is part of training: a checkpoint must keep it (notebook 03), and in large models
it takes more memory than the weights (notebook 07). PyTorch's Adam after one step:
"""),
    code(r"""
model = sgd.logreg(seed=0)
adam = torch.optim.Adam(model.parameters(), lr=0.01)
torch.nn.functional.cross_entropy(model(data.x), data.y).backward()
adam.step()
for name, p in model.named_parameters():
    kept = {key: tuple(v.shape) for key, v in adam.state[p].items()}
    print(f"{name} {tuple(p.shape)}: Adam keeps {kept}")
"""),
    md(r"""
`exp_avg` is $m$, `exp_avg_sq` is $v$, each the shape of its parameter; `step` counts the
steps, for the correction.

## Summary

- Gradient descent: $w \leftarrow w - \eta \nabla L(w)$. SGD replaces $\nabla L$ by the
  gradient of a random mini-batch: unbiased, with noise $\sigma^2/b$.
- Per step, larger batches make more progress; per sample, smaller batches do. Parallel
  hardware makes large batches cheap, which is what data parallelism exploits.
- Too small a learning rate crawls; too large a learning rate oscillates or diverges.
- Linear scaling rule (Goyal et al. 2017): $k$ times the batch, $k$ times the learning
  rate, with a warm-up.
- SGD with momentum keeps one more number per parameter, Adam two (its moments $m$, $v$).

## Exercises

1. Add `1` to `BATCH_SIZES` and set `EPOCHS = 2`. Which batch size reaches a loss of 0.3
   with the fewest *samples*? With the fewest *steps*?
2. Find the largest learning rate for which the loss still decreases steadily with
   `BATCH = 32`. Does it change with `BATCH = 256`?
3. Prepare for notebook 02 with the exercise
   [average the gradients with an allreduce](exercises/01_average_gradients.ipynb).
4. [The linear scaling rule, with a warm-up](exercises/09_linear_scaling_rule.ipynb): the
   learning rate for $p$ workers, as Goyal et al. (2017) set it.

## Check yourself

1. Why is the gradient of a random mini-batch an *unbiased* estimate of the full gradient?
2. You quadruple the batch size. What happens to the gradient noise, and to the number of
   steps per epoch?
3. Eight workers each compute the gradient of 32 samples per step. What is the global
   batch, and what learning rate does the linear scaling rule suggest if 0.1 worked for 32?

<details><summary>Answers</summary>

1. Each sample is equally likely to be in the batch, so the expected batch gradient is the
   average of all sample gradients, $\nabla L$.
2. The noise $\sigma^2/b$ falls to a quarter (the typical error halves); the steps per epoch
   fall to a quarter too.
3. A global batch of $8 \times 32 = 256$ samples, and a learning rate of $8 \times 0.1 = 0.8$,
   reached after a warm-up.
</details>
"""),
    code(r"""
from workbench.quiz import Quiz

Quiz(lesson="sgd_from_scratch")
"""),
]
