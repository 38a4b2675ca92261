"""The GRPO loop: rollout -> reward -> advantages -> pi_old -> update(s) -> metrics.

Source: GRPO with the methods of LOPTI (L2, L3), DVP (P3), TRM (T12), OTB and TIM (V1-V4);
see ``engine/registry.py`` for the registry. One step:

1. ``P`` prompts, ``G`` responses each, sampled by the rollout engine (a real mismatch on the
   ``bf16`` / ``fp16`` / ``kv`` paths; none on ``exact``) with the rollout log-probs.
2. Rewards from the task; one trainer forward at the current weights builds the step's
   :class:`StepRecord` (``pi_old`` under ``recompute``, ``pi_train``, per-token statistics,
   ``log_rho = log pi_train - log pi_roll``, TRM's sampled-token acceptance), from which the
   monitor metrics come; ``bypass`` uses the rollout log-probs as ``pi_old``. On ``exact`` that
   forward is also the rollout's log-probs (V1). It keeps its graph: the first update pass runs
   at the same weights, so it reuses it (its detached log-probs are bitwise what a second
   forward would give). A micro-batch update keeps no graph; where its first pass's gradient
   reads no ``pi_old`` value (``engine/update_plan.py``), that forward carries it back itself.
3. Advantages (group or OTB, then AR), correction weights (TIS / MIS / IcePop / TRM), the passes
   (one, or Lopti's two), one clipped-surrogate update per pass.
4. One JSON line to ``RUN/metrics.jsonl`` (keys in
   :data:`~tailtheory.engine.step_metrics.METRIC_KEYS`); a checkpoint every
   ``checkpoint_every`` steps.

Shapes: ``B = P * G`` responses of ``T`` tokens; per-token ``(B, T)``, logits ``(B, T, V)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from tailtheory.core.io import atomic_write_bytes, atomic_write_json
from tailtheory.core.models import num_params
from tailtheory.engine import checkpoint as ckpt_io
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.devices import resolve_device
from tailtheory.engine.evaluate import held_out_accuracy
from tailtheory.engine.forward_stats import (TrainingDiverged, backward_by_micro_batch,
                                             check_finite, forward_stats, wants_exact_kl)
from tailtheory.engine.methods import trm_sampled_keep
from tailtheory.engine.rollout.engine import RolloutBatch, RolloutConfig, RolloutEngine
from tailtheory.engine.rundir import open_run
from tailtheory.engine.load import (FolderCopy, check_same_folder, from_folder, load_start,
                                     record_provenance, warm_config)
from tailtheory.engine.step_metrics import monitor_metrics, pass_mean, rel_change
from tailtheory.engine.threads import resolve_threads, torch_threads
from tailtheory.engine.types import PolicyBatch
from tailtheory.engine.update_plan import (first_pass_gradient, first_pass_known, pass_loss,
                                           plan_step, reward_tensor)

PROBLEM_SEED = 1000
"""Problem stream of step ``s``: generator seed ``PROBLEM_SEED + 100_000 * seed + s`` (the warm
start uses seeds 100 and 101, so RL never trains on its problems)."""


def rollout_config(cfg: TrainConfig, task, *, exact_from_trainer: bool = True) -> RolloutConfig:
    """The rollout engine's config.

    ``exact_from_trainer``: on the ``exact`` path the rollout log-probs are the trainer's full
    forward (V1); the ``pi_old`` forward is that forward, so the engine samples as ``kv`` and the
    step runs it once (:func:`step_record` with the same value). False lets the engine run its
    own copy of it (tests: the numbers are bitwise the same).
    """
    shared = cfg.rollout == "exact" and exact_from_trainer
    return RolloutConfig(path="kv" if shared else cfg.rollout, backend=cfg.rollout_backend,
                         noise=cfg.rollout_noise, noise_seed=cfg.seed,
                         temperature=cfg.temperature,
                         max_new_tokens=cfg.max_new_tokens or task.max_response_len,
                         prune_rule=cfg.dvp_rule if cfg.spec.vocab else None, rho=cfg.dvp_rho,
                         return_logits=wants_exact_kl(cfg) and not shared,
                         sampler=cfg.sampler)


@dataclass(frozen=True)
class StepRecord:
    """What one step derives from its rollout, built once by :func:`step_record` and passed on."""

    rb: RolloutBatch
    """The rollout (responses, masks, rollout log-probs; on ``exact`` the trainer's, V1)."""
    rewards: list
    """The task's :class:`~tailtheory.engine.tasks.task.Reward` of each response, ``B`` of them."""
    b: PolicyBatch
    """The policy batch: pi_old, pi_train, pi_roll, ``log_rho``, sum p^2, token KL, TRM's
    sampled-token acceptance; the stages add advantages and weights."""
    stats: dict
    """The ``pi_old`` forward's ``token_stats`` (``tailtheory.core.stats``): entropy, pruned mass."""
    vocab_metrics: dict
    """What the vocab stage (DVP) reported."""
    live_logp: torch.Tensor | None
    """``(B, T)`` differentiable log-probs of that forward, for the first pass (or ``None``)."""


def step_record(model, rb, rewards, group_ids, cfg: TrainConfig, step: int, live: bool, *,
                exact_from_trainer: bool = True,
                grad_logp: torch.Tensor | None = None) -> StepRecord:
    """One trainer forward at the current weights gives ``pi_old`` (recompute) or ``pi_train``
    (bypass), every per-token statistic and ``log_rho``; with ``live`` it keeps its graph for
    the first update pass (same weights: the same numbers as a second forward). With
    ``grad_logp`` (B, T), the first pass's ``d loss / d logp`` known before it
    (``engine/update_plan.py``), it runs micro-batch by micro-batch with each one's graph and
    carries that gradient into the parameters' ``.grad`` as it goes.

    On ``exact`` with ``exact_from_trainer`` (the engine built by :func:`rollout_config` with the
    same value left them to this forward) the record's batch is ``rb`` with this forward's
    log-probs (and TRM's logits) as the rollout's (V1); ``rb`` itself is never changed."""
    mask, spec = rb.mask, cfg.spec
    keep, vocab_metrics = None, {}
    if spec.vocab:
        probe = PolicyBatch(logp=rb.logp, old_logp=rb.logp, roll_logp=rb.logp, mask=mask,
                            keep=rb.keep, logits=rb.logits, tokens=rb.response)
        keep, vocab_metrics = spec.vocab.fn(probe, cfg)
    exact = cfg.rollout == "exact" and exact_from_trainer
    self_ref = exact and wants_exact_kl(cfg)
    with torch.set_grad_enabled(live or grad_logp is not None):
        st, z = forward_stats(model, rb, keep, cfg, step, ref=rb.logits, self_ref=self_ref,
                              grad_logp=grad_logp)
    train_logp = st["logp"].detach().masked_fill(~mask, 0.0)
    if exact:  # V1: the exact path's rollout log-probs are this forward's
        rb = replace(rb, logp=train_logp, logits=z if self_ref else rb.logits)
    old_logp = train_logp if cfg.pi_old == "recompute" else rb.logp
    b = PolicyBatch(logp=train_logp, old_logp=old_logp, roll_logp=rb.logp, mask=mask,
                    rewards=reward_tensor(rewards, mask.device), group_ids=group_ids,
                    sum_p2=st["sum_p2"], tok_kl=st.get("kl"),
                    logits=rb.logits, keep=keep, tokens=rb.response,
                    train_logp=train_logp,              # corrections use pi_train / pi_roll
                    entropy=st["entropy"].detach(), seed=cfg.seed, step=step)
    b = replace(b, trm_accept=trm_sampled_keep(mask, b.log_rho, cfg))
    return StepRecord(rb, rewards, b, st, vocab_metrics, st["logp"] if live else None)


def update(model, optimizer, rb, b: PolicyBatch, cfg: TrainConfig, step: int, *,
           logp: torch.Tensor | None = None, current: torch.Tensor | None = None) -> dict:
    """One optimiser step on the active tokens of ``b``; returns the loss metrics.

    ``logp`` (B, T), differentiable: the trainer's log-probs at the current weights when the
    caller already has them (the first pass reuses the ``pi_old`` forward); else one forward.
    With ``cfg.update_memory == "micro-batch"`` no graph is reused: ``current`` (B, T), the
    same log-probs detached (the first pass: the ``pi_old`` forward's), else a no-grad forward,
    gives the loss, and :func:`backward_by_micro_batch` its gradient.
    """
    optimizer.zero_grad(set_to_none=True)
    if cfg.update_memory == "micro-batch":   # the loss on detached log-probs, then d loss / d logp
        if current is None:                  # through each micro-batch's graph on its own
            with torch.no_grad():
                current = forward_stats(model, rb, b.keep, cfg, step)[0]["logp"]
        logp = current.detach().requires_grad_()
    elif logp is None:
        logp = forward_stats(model, rb, b.keep, cfg, step)[0]["logp"]
    loss, metrics = pass_loss(b, cfg, step, logp)
    loss.backward()
    if cfg.update_memory == "micro-batch":
        backward_by_micro_batch(model, rb, b.keep, cfg, step, logp.grad)
    return optimizer_step(model, optimizer, cfg, step, metrics)


def optimizer_step(model, optimizer, cfg: TrainConfig, step: int, metrics: dict) -> dict:
    """Clip the gradient the parameters' ``.grad`` hold, step the optimiser, check the weights;
    returns the pass's ``metrics`` with the gradient norm before clipping."""
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    check_finite(gnorm, "gradient norm", step)
    optimizer.step()
    for p in model.parameters():
        check_finite(p.detach(), "weights", step)
    return {**metrics, "grad/norm": float(gnorm)}


def step_problems(step: int, cfg: TrainConfig, task) -> list:
    """The ``prompts_per_step`` problems of step ``step`` of a run of ``cfg``
    (:data:`PROBLEM_SEED`)."""
    return task.problems(cfg.prompts_per_step, seed=PROBLEM_SEED + 100_000 * cfg.seed + step)


def rollout_step(step: int, cfg: TrainConfig, task, model, engine, generator):
    """``(problems, rollout batch, group_ids (B,))`` of step ``step``: ``G`` responses each to
    the step's problems (:data:`PROBLEM_SEED`), sampled by ``engine`` synced to ``model``."""
    problems = step_problems(step, cfg, task)
    prompts = [p.prompt_ids for p in problems for _ in range(cfg.group_size)]
    group_ids = torch.arange(len(problems)).repeat_interleave(cfg.group_size)   # (B,)
    group_ids = group_ids.to(next(model.parameters()).device)
    engine.sync(model, step=step)  # the step seeds the noise paths' draws (resume included)
    try:
        rb = engine.generate(prompts, eos_id=task.stop_ids, pad_id=task.pad_id,
                             generator=generator)
    except RuntimeError as exc:  # the sampler met NaN / inf probabilities
        raise TrainingDiverged(f"rollout failed at step {step} ({exc}); the run stopped and its "
                               f"last good checkpoint is kept") from exc
    return problems, rb, group_ids


def train_step(step: int, cfg: TrainConfig, task, model, engine, optimizer, generator, *,
               share_forward: bool = True,
               exact_from_trainer: bool = True) -> tuple[dict, StepRecord]:
    """One GRPO step. Returns ``(metrics, the step's record)`` (the record for the token dump).

    Two options choose how the step computes, never what (tests run both ways and compare
    bitwise); they are not config fields, so no run's identity holds them:

    - ``share_forward``: the ``pi_old`` forward keeps its graph and serves the first update pass
      (both run at the same weights, so the numbers are those of two forwards); in a micro-batch
      update whose first pass's gradient is known before it
      (:func:`~tailtheory.engine.update_plan.first_pass_known`) that forward backpropagates it,
      micro-batch by micro-batch. False runs a second forward.
    - ``exact_from_trainer``: on the ``exact`` path the rollout log-probs are the trainer's full
      forward (V1); the ``pi_old`` forward is that forward, so the engine samples as ``kv`` and
      the step runs it once. False lets the engine run its own copy of it. ``engine`` must come
      from :func:`rollout_config` with the same value.
    """
    t0 = time.perf_counter()
    problems, rb, group_ids = rollout_step(step, cfg, task, model, engine, generator)
    t_roll = time.perf_counter() - t0
    G = cfg.group_size
    rw = [task.reward(problems[i // G], rb.response[i]) for i in range(rb.response.shape[0])]
    first = None  # the first pass's gradient, known before the forward: it runs inside it
    if share_forward and first_pass_known(cfg):
        first = first_pass_gradient(rb.mask, reward_tensor(rw, rb.mask.device), group_ids, cfg,
                                    step)
        optimizer.zero_grad(set_to_none=True)
    rec = step_record(model, rb, rw, group_ids, cfg, step,
                      live=share_forward and cfg.update_memory == "batch",
                      exact_from_trainer=exact_from_trainer,
                      grad_logp=None if first is None else first[0])
    b, groups, flat, loss_mask, m_plan = plan_step(rec.b, cfg)
    # A pass with no active token is skipped: no forward, no optimiser step (AdamW's momentum and
    # step count would still move the weights), no share of the metric averages.
    per_pass = []
    before = [p.detach().clone() for p in model.parameters()]
    for _, active in groups:  # the first pass run is at pi_old's weights: reuse its forward
        if not (active & loss_mask).any():
            continue
        if first is not None and not per_pass:  # the pi_old forward left its gradient in .grad
            per_pass.append(optimizer_step(model, optimizer, cfg, step, first[1]))
        else:
            per_pass.append(update(model, optimizer, rec.rb,
                                   replace(b, active=active, mask=loss_mask), cfg, step,
                                   logp=None if per_pass else rec.live_logp,
                                   current=None if per_pass or not share_forward
                                   else rec.b.train_logp))
    metrics = {"step": step, **monitor_metrics(rec, flat), **rec.vocab_metrics, **m_plan,
               **pass_mean(per_pass), "update/rel_size": rel_change(before, model),
               "time/rollout_s": t_roll,
               "time/step_s": time.perf_counter() - t0}
    return metrics, replace(rec, b=b)


def dump_tokens(run: Path, step: int, b: PolicyBatch, rb) -> Path:
    """Per-token probabilities, advantages and ``log_rho`` of one step to parquet (atomic)."""
    import io

    import pandas as pd

    seq, t = b.mask.nonzero(as_tuple=True)
    col = lambda x: x[seq, t].detach().double().cpu().numpy()  # noqa: E731
    df = pd.DataFrame({"step": step, "seq": seq.cpu().numpy(), "t": t.cpu().numpy(),
                       "group": b.group_ids[seq].cpu().numpy(),
                       "token": rb.response[seq, t].cpu().numpy(),
                       "p_old": col(b.old_logp.exp()), "logp_old": col(b.old_logp),
                       "logp_roll": col(b.roll_logp), "log_rho": col(b.log_rho),
                       "adv": col(b.adv), "weight": col(b.weight)})
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return atomic_write_bytes(Path(run) / "tokens" / f"step_{step:06d}.parquet", buf.getvalue())


def train(cfg: TrainConfig, resume: bool = False, progress: bool = True, task=None, *,
          share_forward: bool = True, exact_from_trainer: bool = True,
          warm: str | Path | None = None, copy: FolderCopy | None = None) -> Path:
    """Run (or, with ``resume``, continue) ``cfg`` and return the run directory ``cfg.out``.

    A model saved in a folder is read and checked first (its tokenizer, its vocabulary, its
    architecture: :func:`~tailtheory.engine.load.load_start`; on ``resume``, that it still holds
    the run's starting model), before anything is written. The directory is then checked,
    locked and marked (rules in :mod:`tailtheory.engine.rundir`); then the warm start of a
    ``warm`` model is found or trained (one outside its accuracy window raises
    :class:`~tailtheory.engine.start.warm_cache.WarmStartMissed`). The device, the warm start and
    torch's thread count (which depends on the model's size) are resolved once, here, and passed
    on; the thread count is restored on return. ``task`` replaces the task named by ``cfg.task``
    (tests pass one with a denser reward). ``share_forward`` and ``exact_from_trainer`` choose
    how a step computes, never what (:func:`train_step`); they are not config fields. ``warm``:
    the folder of a ``warm`` model's warm start when the caller holds it already (a study's
    worker is shipped its start and never trains one, :mod:`tailtheory.experiments.remote`);
    ``copy``: a folder model's copy, read in place of ``cfg.model`` and recorded as it
    (:class:`~tailtheory.engine.load.FolderCopy`; such a worker's run).
    """

    device = resolve_device(cfg.device)  # cuda without a GPU fails before any work
    if resume and from_folder(cfg):
        check_same_folder(Path(cfg.out), cfg, copy)
    start = load_start(cfg, task=task, copy=copy) if from_folder(cfg) else None  # before --out
    with open_run(cfg.out, resume), torch_threads(torch.get_num_threads()):
        if cfg.model == "warm" and warm is None:
            from tailtheory.engine.start.warm_cache import warm_start

            warm = warm_start(warm_config(cfg), progress=progress, threads=cfg.threads)
        model, task = start or load_start(cfg, warm, task)
        record_provenance(Path(cfg.out), cfg, model, resume, copy)
        model = model.to(device)
        torch.set_num_threads(resolve_threads(cfg.threads, num_params(model), device))
        return _train(cfg, resume, progress, task, model, device, share_forward=share_forward,
                      exact_from_trainer=exact_from_trainer)


def _train(cfg: TrainConfig, resume: bool, progress: bool, task, model, device: str, *,
           share_forward: bool, exact_from_trainer: bool) -> Path:
    """The steps of :func:`train` on the task, model and device it resolved."""
    from tqdm.auto import tqdm

    run, spec = Path(cfg.out), cfg.spec
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                  foreach=True)  # bitwise the per-tensor loop, faster on CPU
    generator = torch.Generator(device).manual_seed(cfg.seed)
    start = _restore(run, cfg, model, optimizer, generator) if resume else 0
    atomic_write_json(run / "config.json", cfg.to_dict())
    engine = RolloutEngine(model, rollout_config(cfg, task, exact_from_trainer=exact_from_trainer))
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=f"train {spec.label}",
               unit="step", disable=not progress)
    for step in bar:
        acc = _evaluate(step, cfg, task, model)
        metrics, rec = train_step(step, cfg, task, model, engine, optimizer, generator,
                                  share_forward=share_forward,
                                  exact_from_trainer=exact_from_trainer)
        metrics = {**metrics, "eval/accuracy": acc}
        ckpt_io.append_metrics(run, metrics)
        if cfg.dump_tokens:
            dump_tokens(run, step, rec.b, rec.rb)
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
            ckpt_io.save_checkpoint(run, step + 1, model, optimizer, generator, cfg)
        bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}",
                        mismatch=f"{metrics['mismatch/abs_mean']:.1e}")
    return run


def _evaluate(step: int, cfg: TrainConfig, task, model) -> float | None:
    """Held-out accuracy before step ``step``, every ``eval_every`` steps (from step 0). Never
    depends on ``cfg.steps``, so a run's lines are a prefix of a longer run's."""
    if not cfg.eval_every or step % cfg.eval_every:
        return None
    return held_out_accuracy(model, task, cfg.eval_n, cfg.temperature,
                             seed=1_000_003 * cfg.seed + step, backend=cfg.rollout_backend)


def _restore(run: Path, cfg: TrainConfig, model, optimizer, generator) -> int:
    """Load the checkpoint of ``run`` into the objects; drop metric lines past it. A run stopped
    before its first checkpoint starts again at step 0 (same config, so the same lines)."""
    import sys

    state = ckpt_io.load_checkpoint(run, cfg, allow_none=True)
    start = 0 if state is None else state["step"]
    if start > cfg.steps:
        raise ValueError(f"--steps {cfg.steps} is fewer than the {start} steps {run} has done; "
                         f"pass --steps {start} or more to continue it")
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        ckpt_io.set_rng_state(state["rng"], generator)
    note = ckpt_io.truncate_metrics(run, start)
    if note:
        print(f"tailtheory: {note}", file=sys.stderr)
    return start

