"""Supervised warm start: a tiny causal LM that solves a task sometimes, not always.

RL needs signal (some rollouts in a group must be right) and the tail claims need a policy with a
real tail (a model that is always right is nearly deterministic on its answer tokens). So the
warm start trains with AdamW on ``prompt -> answer <eos>`` pairs and stops as soon as its
*sampled* accuracy (temperature 1, on held-out problems, measured every ``eval_every`` steps)
enters the window ``[max(acc_low, chance + chance_margin), acc_high]``: 10% to 70% by default,
raised to 22.5% for three-person Knights and Knaves, where guessing the format alone scores 1/8.
The budget is a number of steps (``max_steps``), never wall time, so the result does not depend on
how busy the machine is.

A result is keyed by :func:`config_hash`; :mod:`tailtheory.engine.start.warm_cache` keeps it on disk,
hands out only results inside their window, and runs ``tailtheory sft``.

Held-out problems come from generator seed ``eval_seed``; training problems from ``train_seed``,
minus any whose prompt also occurs among the held-out ones.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.models import TinyLMConfig, num_params, tiny_lm
from tailtheory.engine.start.corpus_lm import CorpusLMConfig, corpus_lm, load_corpus_lm
from tailtheory.engine.start.resume import Resume, digest
from tailtheory.engine.rollout.engine import HF, RolloutConfig, RolloutEngine
from tailtheory.engine.tasks.task import TASKS, Problem, Task, get_task
from tailtheory.engine.threads import resolve_threads, torch_threads

SFT_CACHE_VERSION = 2
"""Part of the config hash: bump it when a change to this module changes what gets trained."""

IGNORE_INDEX = -100
"""Label of prompt and padding positions (ignored by the ``transformers`` causal-LM loss)."""


@lru_cache(maxsize=None)
def _chance(task: str, vocab_size: int, kwargs_json: str) -> float:
    """``chance_accuracy`` of ``task`` with these kwargs (JSON, sorted) on the word-level
    tokenizer, computed once: a task's chance level depends on its rules, not on the config
    that names it. Bad kwargs raise as :func:`get_task` does."""
    return get_task(task, vocab_size=vocab_size, **json.loads(kwargs_json)).chance_accuracy


@dataclass(frozen=True)
class SFTConfig:
    """What to warm-start and when to stop. Every field but the step budget enters the cache hash."""

    task: str = "kk"
    """Task name, one of ``tasks.TASKS``."""
    task_kwargs: dict = field(default_factory=dict)
    """Task constructor arguments, e.g. ``{"n_people": 2}`` (kk defaults to 3 people)."""
    model: TinyLMConfig = TinyLMConfig(hidden=128, layers=4, heads=4, kv_heads=2)
    """Model size: hidden 128, 4 layers, V = 512 (723,072 parameters)."""
    batch_size: int = 128
    lr: float = 1e-3
    """AdamW learning rate (reaches the window in minutes at batch 128 on a 2-core CPU)."""
    weight_decay: float = 0.01
    """AdamW's default decoupled weight decay."""
    max_steps: int = 3000
    """The budget: optimiser steps before a run that never entered the window stops (a step
    count, not wall time, so a busy machine gives the same result, only later)."""
    eval_every: int = 25
    """Steps between sampled-accuracy evaluations; smaller catches the window more precisely."""
    eval_n: int = 256
    """Held-out problems per evaluation (the accuracy's standard error is <= 3.1%)."""
    acc_low: float = 0.10
    acc_high: float = 0.70
    """Stop once ``low <= accuracy <= acc_high``: signal for RL, and a real tail."""
    chance_margin: float = 0.10
    """``low = max(acc_low, chance + chance_margin)``: a model that has learnt only the answer
    format already guesses ``chance`` right (1/8 for three knights-and-knaves people)."""
    temperature: float = 1.0
    """Sampling temperature of the accuracy evaluation (that of the RL rollouts)."""
    pool_size: int = 16384
    """Training problems generated up front (about 8 s for Knights and Knaves); batches are drawn
    from them with replacement."""
    train_seed: int = 100
    eval_seed: int = 101
    """Generator seeds of the training and held-out problems; RL should draw from other seeds."""
    seed: int = 0
    """Model initialisation, batch order and evaluation sampling."""
    pretrained: CorpusLMConfig | None = None
    """Start from the corpus LM of this config (:mod:`tailtheory.engine.start.corpus_lm`: its weights and
    its byte-level BPE tokenizer, which the task then speaks; ``model`` must be its model) instead
    of a random ``model`` speaking the word-level tokenizer (``None``)."""
    stop_in_window: bool = True
    """Stop as soon as the accuracy enters the window (the warm start RL needs). False trains
    exactly ``max_steps`` steps and keeps the result whatever its accuracy: a pipeline check
    (the notebooks' ``quick`` preset), never evidence."""

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, got {self.task!r}")
        for name in ("batch_size", "max_steps", "eval_every", "eval_n", "pool_size"):
            check_positive_int(getattr(self, name), name)
        for name in ("train_seed", "eval_seed", "seed"):
            check_positive_int(getattr(self, name), name, minimum=0)
        if self.train_seed == self.eval_seed:
            raise ValueError(f"train_seed and eval_seed must differ (both {self.train_seed})")
        if not 0.0 <= self.acc_low < self.acc_high <= 1.0:
            raise ValueError(f"need 0 <= acc_low < acc_high <= 1, got acc_low={self.acc_low}, "
                             f"acc_high={self.acc_high}")
        for name in ("lr", "temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0.0 <= self.chance_margin < 1.0:
            raise ValueError(f"chance_margin must lie in [0, 1), got {self.chance_margin}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.pretrained is not None and self.pretrained.model != self.model:
            raise ValueError(f"model must be the pretrained corpus LM's model "
                             f"({self.pretrained.model}), got {self.model}")
        # bad task_kwargs fail here, not in training; the chance level is computed once per
        # task, vocabulary and kwargs (building a task builds its tokenizer)
        try:
            chance = _chance(self.task, self.model.vocab_size,
                             json.dumps(self.task_kwargs, sort_keys=True))
        except TypeError:  # kwargs JSON cannot hold: no cache
            chance = self.make_task().chance_accuracy
        low = max(self.acc_low, chance + self.chance_margin)
        if low > self.acc_high:
            raise ValueError(f"the window is empty: chance + chance_margin = {low:.3f} exceeds "
                             f"acc_high = {self.acc_high}")

    @classmethod
    def for_task(cls, task: str, **overrides) -> "SFTConfig":
        """The config of ``task`` with its own defaults (:data:`TASK_DEFAULTS`), then
        ``overrides``: a long-response task needs a smaller batch to keep a step near a second."""
        return cls(task=task, **{**TASK_DEFAULTS.get(task, {}), **overrides})

    def acc_floor(self, task: Task) -> float:
        """Lower edge of the accuracy window for ``task``."""
        return max(self.acc_low, task.chance_accuracy + self.chance_margin)

    def make_task(self, tokenizer=None) -> Task:
        """The task this config trains on, with the model's vocabulary size, speaking
        ``tokenizer`` (``None``: the word-level one)."""
        return get_task(self.task, vocab_size=self.model.vocab_size, tokenizer=tokenizer,
                        **self.task_kwargs)

    def start(self, device: str = "cpu") -> tuple:
        """``(model, task)`` training starts from: the pretrained corpus LM and the task speaking
        its tokenizer (trained first when it is not cached), or a random ``model`` built from
        ``seed`` and the task speaking the word-level tokenizer."""
        if self.pretrained is None:
            return tiny_lm(self.model, seed=self.seed).to(device), self.make_task()
        model, tokenizer = load_corpus_lm(corpus_lm(self.pretrained), device=device)
        return model, self.make_task(tokenizer)


TASK_DEFAULTS = {"kk_trace": {"batch_size": 32, "lr": 2e-3, "eval_every": 50},
                 "kk_prose": {"batch_size": 32, "lr": 1e-3, "eval_every": 50,
                              "pretrained": CorpusLMConfig(), "model": CorpusLMConfig().model}}
"""Per-task departures from the :class:`SFTConfig` defaults. ``kk_trace``'s responses are about
100 tokens (25x ``kk``'s): batch 128 took 5.4 s a step on a 2-core CPU; batch 32 at lr 2e-3
entered the window (accuracy 0.25) after 750 steps, evaluated every 50 (measured). ``kk_prose``
starts from the pretrained corpus LM, whose tokenizer has a real vocabulary tail."""

_BUDGET_FIELDS = ("max_steps",)
"""Fields that bound the run but do not change what a finished run trained: a result that entered
the accuracy window at step ``s`` is the same result for every budget ``>= s``."""


def config_hash(cfg: SFTConfig) -> str:
    """12 hex digits of SHA-256 over the config (less the step budget) and ``SFT_CACHE_VERSION``."""
    budget = _BUDGET_FIELDS if cfg.stop_in_window else ()  # a fixed run: its length counts
    fields = {k: v for k, v in asdict(cfg).items() if k not in budget}
    if cfg.stop_in_window:  # the default stays out of the hash: earlier caches keep their keys
        del fields["stop_in_window"]
    # a pretrained start is keyed by its config, as the warm start itself is: another Python's
    # stdlib pretrains another model under the same key, as another CPU trains another warm start
    # (the corpus LM's own cache keys on its corpus bytes)
    if cfg.pretrained is None:
        del fields["pretrained"]
    blob = json.dumps({"version": SFT_CACHE_VERSION, **fields}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def sft_data(cfg: SFTConfig, task: Task):
    """``(X, Y, held_out)``: packed training pool ``(N, L)`` and the held-out problems.

    Training problems whose prompt also occurs among the held-out ones are dropped.
    """
    held_out = task.problems(cfg.eval_n, seed=cfg.eval_seed)
    seen = {tuple(p.prompt_ids) for p in held_out}
    pool = [p for p in task.problems(cfg.pool_size, seed=cfg.train_seed)
            if tuple(p.prompt_ids) not in seen]
    if not pool:
        raise ValueError(f"every training problem also occurs among the {cfg.eval_n} held-out "
                         f"ones; lower eval_n or pick a task with more distinct problems")
    X, Y = pack_sft_batch(task, pool)                                       # (N, L)
    return X, Y, held_out


def train_sft(cfg: SFTConfig, progress: bool = True, threads: int = 0,
              checkpoints: Path | None = None):
    """Train until the sampled accuracy enters the window; returns ``(model, task, record)``.

    ``record["stop"]``: ``window`` (accuracy inside ``record["window"]``), ``overshoot``
    (above ``acc_high`` at the first evaluation past the floor: evaluate more often),
    ``max_steps``, or ``fixed_steps`` (``stop_in_window`` off); ``record["usable"]`` is true for
    ``window`` and ``fixed_steps``. ``threads``: torch CPU
    threads (0: one for a model this small on the CPU); ``checkpoints``: a folder to checkpoint
    into and continue from (:mod:`tailtheory.engine.start.resume`).
    """
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, task = cfg.start(device)
    with torch_threads(resolve_threads(threads, num_params(model), device)):
        return sft_loop(cfg, model.train(), task, device, progress, checkpoints)


def sft_loop(cfg: SFTConfig, model, task: Task, device: str, progress: bool,
             checkpoints: Path | None = None):
    """:func:`train_sft`'s loop on a given ``model`` (training mode) speaking ``task``:
    ``(model, task, record)``; ``cfg.model`` and ``cfg.pretrained`` are not read. A checkpoint
    in ``checkpoints`` of the same config and data is continued."""
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    X, Y, held_out = sft_data(cfg, task)
    lengths = packed_lengths(Y)                         # (N,) on the CPU: pad may equal EOS
    X, Y = X.to(device), Y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    g = torch.Generator().manual_seed(cfg.seed)
    low = cfg.acc_floor(task)
    start = digest(*model.state_dict().values()) if checkpoints is not None else ""
    resume = Resume(checkpoints, f"{config_hash(cfg)}:{digest(X, Y)}:{start}", progress=progress)
    done, history, spent = resume.restore(model, opt, g)
    stop, t_train = "max_steps", time.perf_counter() - spent
    t0 -= spent
    bar = tqdm(range(done + 1, cfg.max_steps + 1), initial=done, total=cfg.max_steps,
               desc=f"sft {cfg.task}", unit="step", disable=not progress, file=sys.stderr)
    for step in bar:
        idx = torch.randint(len(X), (cfg.batch_size,), generator=g)        # (batch,) on the CPU
        width = int(lengths[idx].max())     # the batch's longest sequence: no all-pad columns
        attn = torch.arange(width) < lengths[idx][:, None]                 # (batch, width)
        idx = idx.to(device)
        loss = sft_step(model, opt, X[idx, :width], Y[idx, :width], attn.to(device))
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            acc = sampled_accuracy(model, task, held_out, cfg.temperature, seed=cfg.seed + step)
            history.append({"step": step, "loss": loss, "accuracy": acc})
            bar.set_postfix(loss=f"{loss:.3f}", acc=f"{acc:.2f}")
            if not cfg.stop_in_window:
                stop = "fixed_steps"
            elif (stop := stop_reason(acc, low, cfg.acc_high) or stop) != "max_steps":
                break
        if step < cfg.max_steps:                        # the last step is always evaluated
            resume.maybe_save(step, model, opt, g, history, time.perf_counter() - t_train)
    bar.close()
    record = {"config": asdict(cfg), "hash": config_hash(cfg), "steps": step, "accuracy": acc,
              "in_window": low <= acc <= cfg.acc_high,
              "usable": stop in ("window", "fixed_steps"), "stop": stop,
              "window": [low, cfg.acc_high], "chance": task.chance_accuracy,
              "seconds": round(time.perf_counter() - t0, 2),
              "train_seconds": round(time.perf_counter() - t_train, 2),
              "threads": torch.get_num_threads(),
              "train_problems": len(X), "held_out": len(held_out),
              "n_params": num_params(model), "device": device, "history": history,
              **({"resumed_from": resume.resumed_from} if resume.resumed_from else {})}
    return model.eval(), task, record


def sft_step(model, opt, x: torch.Tensor, y: torch.Tensor, attn: torch.Tensor) -> float:
    """One AdamW step on the mean response-token cross-entropy. Shapes: x, y, attn (B, L); attn
    is True on each row's tokens, False on its right padding (from the rows' lengths, never from
    comparing with the pad id, which may be the EOS id)."""
    loss = model(input_ids=x, attention_mask=attn.long(), labels=y).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def stop_reason(acc: float, low: float, high: float) -> str | None:
    """Why training stops after an evaluation with accuracy ``acc``; None to go on."""
    if acc >= low:
        return "window" if acc <= high else "overshoot"
    return None


def pack_sft_batch(task: Task, problems: list[Problem]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + answer + <eos>`` ids and labels (``IGNORE_INDEX`` on the prompt
    and padding). Shapes: ``(N, L)`` and ``(N, L)``."""
    seqs = [(p.prompt_ids, task.target_ids(p)) for p in problems]
    L = max(len(a) + len(b) for a, b in seqs)
    X = torch.full((len(seqs), L), task.pad_id, dtype=torch.long)
    Y = torch.full((len(seqs), L), IGNORE_INDEX, dtype=torch.long)
    for i, (prompt, target) in enumerate(seqs):
        n, m = len(prompt), len(target)
        X[i, : n + m] = torch.tensor(prompt + target)
        Y[i, n: n + m] = torch.tensor(target)
    return X, Y


def packed_lengths(Y: torch.Tensor) -> torch.Tensor:
    """Length of each right-padded row of :func:`pack_sft_batch`: one past its last labelled
    position (every row ends on its target's EOS). Shapes: Y (N, L) -> (N,)."""
    L = Y.shape[1]
    return L - (Y != IGNORE_INDEX).flip(-1).long().argmax(-1)


@torch.no_grad()
def sampled_accuracy(model, task: Task, problems: list[Problem], temperature: float = 1.0,
                     seed: int = 0, backend: str = HF) -> float:
    """Fraction of ``problems`` whose sampled response (at ``temperature``) is correct.

    Samples with the rollout engine's float32 ``kv`` path, ``task.max_response_len`` tokens, on
    ``backend`` (by default ``hf``: the warm start's own evaluation, which its cache keys depend
    on).
    """
    device = next(model.parameters()).device
    eng = RolloutEngine(model, RolloutConfig(path="kv", temperature=temperature,
                                             max_new_tokens=task.max_response_len,
                                             backend=backend))
    rb = eng.generate([p.prompt_ids for p in problems], eos_id=task.stop_ids, pad_id=task.pad_id,
                      generator=torch.Generator(device).manual_seed(seed))
    return sum(task.reward(p, r).correct for p, r in zip(problems, rb.response)) / len(problems)
