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
   forward would give).
3. Advantages (group or OTB, then AR), correction weights (TIS / MIS / IcePop / TRM), the passes
   (one, or Lopti's two), one clipped-surrogate update per pass.
4. One JSON line to ``RUN/metrics.jsonl`` (keys in :data:`METRIC_KEYS`); a checkpoint every
   ``checkpoint_every`` steps.

Shapes: ``B = P * G`` responses of ``T`` tokens; per-token ``(B, T)``, logits ``(B, T, V)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from tailtheory.core.estimators import k1, k3
from tailtheory.core.io import atomic_write_bytes, atomic_write_json
from tailtheory.engine import checkpoint as ckpt_io
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.methods import LOSS_METRICS, trm_sampled_keep
from tailtheory.engine.registry import advantages, correction_weight, passes
from tailtheory.engine.rollout import (RolloutBatch, RolloutConfig, RolloutEngine,
                                       fused_response_stats, response_logits, use_fused_head)
from tailtheory.engine.types import PolicyBatch
from tailtheory.core.stats import token_stats

METRIC_KEYS = {
    "step": "0-based step index",
    "reward/mean": "mean task reward of the step's responses",
    "reward/accuracy": "fraction of responses with the correct answer",
    "reward/format": "fraction of responses in the task's answer format",
    "rollout/tokens": "response tokens of the step (up to and including EOS)",
    "rollout/len_mean": "mean response tokens per sequence",
    "rollout/len_max": "max response tokens of a sequence",
    "rollout/len_median": "median response tokens per sequence",
    "policy/entropy": "mean entropy of pi_old over response tokens",
    "mismatch/abs_mean": "mean |log rho| over response tokens, log rho = log pi_train - "
                         "log pi_roll (V2)",
    "mismatch/abs_max": "max of the same",
    "mismatch/k1": "mean k1 = -log rho, rho = pi_train / pi_roll (T12)",
    "mismatch/k3": "mean k3 = rho - 1 - log rho (T12)",
    "trm/accept_rate": "TRM's acceptance as a monitor (k2/k3 of log pi_train / pi_roll); the trm "
                       "correction's own rate is trm/kept_frac",
    "dvp/pruned_mass": "mean pruned mass of the trainer's distribution (0 without dvp)",
    "adv/abs_mean": "mean |advantage| over response tokens (before reweighting)",
    "loss/policy": "clipped-surrogate loss (mean over passes)",
    "loss/clipfrac": "fraction of active tokens where the clip binds (mean over passes)",
    "loss/ratio_mean": "mean pi_new / pi_old over active tokens (mean over passes)",
    "loss/approx_kl": "mean k3 of log pi_new / pi_old over active tokens (mean over passes)",
    "loss/active_frac": "fraction of response tokens in the pass with a non-zero weight",
    "grad/norm": "parameter-gradient norm before clipping (mean over passes)",
    "adv/zero_var_frac": "fraction of groups whose G rewards are all equal (no group-baseline "
                         "signal)",
    "update/rel_size": "relative size of the step's update, ||theta_after - theta_before|| / "
                       "||theta_before||",
    "eval/accuracy": "sampled accuracy on eval_n held-out problems before the step's update "
                     "(every eval_every steps from step 0; null otherwise)",
    "time/rollout_s": "wall-clock seconds of the rollout",
    "time/step_s": "wall-clock seconds of the step",
}
"""Keys every line of ``metrics.jsonl`` has; a line has exactly these plus the keys its methods
declare (:attr:`~tailtheory.engine.registry.MethodSpec.metric_keys`)."""

PROBLEM_SEED = 1000
"""Problem stream of step ``s``: generator seed ``PROBLEM_SEED + 100_000 * seed + s`` (the warm
start uses seeds 100 and 101, so RL never trains on its problems)."""


_SHARE_FORWARD = True
"""The ``pi_old`` forward keeps its graph and serves the first update pass (both run at the same
weights, so the numbers are those of two forwards); False runs a second forward (tests)."""

_EXACT_FROM_TRAINER = True
"""On the ``exact`` path the rollout log-probs are the trainer's full forward (V1); the
``pi_old`` forward is that forward, so the engine samples as ``kv`` and the step runs it once.
False lets the engine run its own copy of it (tests: the numbers are bitwise the same)."""


class TrainingDiverged(ValueError):
    """A NaN or inf in the loss, the logits or the weights; the last good checkpoint is kept."""


def load_task(cfg: TrainConfig):
    from tailtheory.engine.tasks import get_task

    return get_task(cfg.task, seed=cfg.seed, **_task_kwargs(cfg))


def _task_kwargs(cfg: TrainConfig) -> dict:
    kk = cfg.task in ("kk", "kk_trace")
    return {"n_people": cfg.n_people} if kk and cfg.n_people != 3 else {}


def warm_config(cfg: TrainConfig):
    """The :class:`~tailtheory.engine.sft.SFTConfig` of the warm start ``model="warm"`` uses."""
    from tailtheory.engine.sft import SFTConfig

    return SFTConfig.for_task(cfg.task, task_kwargs=_task_kwargs(cfg))


def load_model(cfg: TrainConfig, task):
    """The float32 trainer model named by ``cfg.model`` (see :class:`TrainConfig`)."""
    from tailtheory.core.models import load_lm, tiny_lm

    if cfg.model == "tiny":
        model = tiny_lm(vocab_size=task.vocab_size, hidden=32, layers=1, heads=2, kv_heads=1,
                        seed=cfg.seed)
    elif cfg.model == "warm":
        from tailtheory.engine.warm_cache import warm_start

        model = load_lm(warm_start(warm_config(cfg)), device="cpu")
    else:
        model = load_lm(cfg.model, device="cpu")
    return model.float().eval()


def _wants_exact_kl(cfg: TrainConfig) -> bool:
    return any(m.name == "trm" for m in cfg.spec.corrections) and cfg.trm_estimator == "exact"


def _exact_in_trainer(cfg: TrainConfig) -> bool:
    return cfg.rollout == "exact" and _EXACT_FROM_TRAINER


def rollout_config(cfg: TrainConfig, task) -> RolloutConfig:
    """The rollout engine's config; ``exact`` samples as ``kv`` and leaves its log-probs and
    logits to the trainer's forward (:data:`_EXACT_FROM_TRAINER`)."""
    shared = _exact_in_trainer(cfg)
    return RolloutConfig(path="kv" if shared else cfg.rollout, backend=cfg.rollout_backend,
                         temperature=cfg.temperature,
                         max_new_tokens=cfg.max_new_tokens or task.max_response_len,
                         prune_rule=cfg.dvp_rule if cfg.spec.vocab else None, rho=cfg.dvp_rho,
                         return_logits=_wants_exact_kl(cfg) and not shared)


def _finite(x: torch.Tensor, what: str, step: int) -> None:
    if not torch.isfinite(x).all():
        raise TrainingDiverged(f"non-finite {what} at step {step}; the run stopped and its last "
                               f"good checkpoint is kept")


def _mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x.double() * mask).sum() / mask.sum().clamp(min=1))


def _forward_stats(model, rb, keep, cfg: TrainConfig, step: int, ref=None,
                   self_ref: bool = False) -> tuple[dict, torch.Tensor | None]:
    """The trainer forward's per-token statistics, and its detached logits on the full path.

    Fused LM head (no ``(B, T, V)`` logits) when :func:`use_fused_head` and the step does not
    need whole distributions (TRM's exact KL: to the sampler's logits, or on ``exact`` to this
    forward's own, V1). Decided by the run, not the call: every forward of a step takes one path.

    Batches of more than ``cfg.micro_batch`` rows run in micro-batches (:func:`_micro_batched`):
    the same statistics, the graph kept per micro-batch, so one ``backward`` of the step's loss
    runs through each micro-batch's graph on its own small tensors.
    """
    B = rb.response.shape[0]
    if not cfg.micro_batch or B <= cfg.micro_batch:
        return _forward_stats_rows(model, rb, keep, cfg, step, ref, self_ref)
    return _micro_batched(model, rb, keep, cfg, step, ref, self_ref)


def _micro_batched(model, rb, keep, cfg: TrainConfig, step: int, ref,
                   self_ref: bool) -> tuple[dict, torch.Tensor | None]:
    """:func:`_forward_stats_rows` over micro-batches of ``cfg.micro_batch`` rows of similar
    length (rows sorted by prompt + response length), each trimmed to its own longest prompt and
    response; results scattered back to the batch's row order and zero-padded to ``T``.

    A full forward over ``B`` rows is slower on a CPU than the same rows in micro-batches of
    64: its activations leave the caches (256 rows: 1.4x the time at 130 tokens a row,
    ``benchmarks/bench_step.py``; 4x at 85 tokens). The numbers equal the whole-batch
    forward's up to float32 rounding (reduction order), and are bitwise the same from one run to
    the next.
    """
    B, T = rb.response.shape
    lens = rb.mask.sum(-1)                                                    # (B,)
    order = torch.argsort(rb.prompt_lens + lens, stable=True)
    parts, logits = [], []
    for rows in order.split(cfg.micro_batch):
        sub = _rows(rb, rows, int(rb.prompt_lens[rows].max()), int(lens[rows].max()))
        st, z = _forward_stats_rows(model, sub, _slice_bt(keep, rows, sub), cfg, step,
                                    _slice_bt(ref, rows, sub), self_ref)
        parts.append((rows, st))
        logits.append((rows, z))
    out = {}
    for name in parts[0][1]:
        first = parts[0][1][name]
        full = first.new_zeros((B, T) + tuple(first.shape[2:]))
        full = full.index_put((order,), torch.cat([_pad_t(st[name], T) for _, st in parts]))
        out[name] = full
    z = None
    if logits[0][1] is not None:
        z = torch.cat([_pad_t(z, T) for _, z in logits])
        z = z.new_zeros(z.shape).index_put((order,), z)
    return out, z


def _pad_t(x: torch.Tensor, T: int) -> torch.Tensor:
    """``x (b, t, ...)`` zero-padded along dim 1 to ``T`` (differentiable)."""
    if x.shape[1] == T:
        return x
    pad = x.new_zeros((x.shape[0], T - x.shape[1]) + tuple(x.shape[2:]))
    return torch.cat([x, pad], 1)


def _slice_bt(x, rows: torch.Tensor, sub) -> torch.Tensor | None:
    """Rows ``rows`` of a ``(B, T, ...)`` tensor, cut to ``sub``'s response length."""
    return None if x is None else x[rows, :sub.response.shape[1]]


def _rows(rb: RolloutBatch, rows: torch.Tensor, p: int, t: int) -> RolloutBatch:
    """Rows ``rows`` of ``rb``: the prompt block cut to its last ``p`` columns (left padding only
    is dropped), the response to its first ``t`` tokens (past every row's EOS)."""
    P = rb.prompt_len
    t = max(t, 1)
    cols = torch.arange(P - p, P + t, device=rb.input_ids.device)
    return RolloutBatch(input_ids=rb.input_ids[rows][:, cols], prompt_len=p,
                        response=rb.response[rows, :t], mask=rb.mask[rows, :t],
                        logp=rb.logp[rows, :t], logits=None,
                        attention_mask=rb.attention_mask[rows][:, cols],
                        prompt_lens=rb.prompt_lens[rows])


def _forward_stats_rows(model, rb, keep, cfg: TrainConfig, step: int, ref=None,
                        self_ref: bool = False) -> tuple[dict, torch.Tensor | None]:
    """:func:`_forward_stats` in one forward over every row of ``rb``."""
    if use_fused_head(model) and not _wants_exact_kl(cfg):
        st = fused_response_stats(model, rb, cfg.temperature, keep)
        _finite(st["logp"].detach(), "log-probs", step)
        return st, None
    z = response_logits(model, rb)                                       # (B, T, V)
    _finite(z.detach(), "logits", step)
    st = token_stats(z, rb.response, ref_logits=z.detach() if self_ref else ref, keep=keep,
                     temperature=cfg.temperature)
    return st, z.detach()


@dataclass(frozen=True)
class StepRecord:
    """What one step derives from its rollout, built once by :func:`step_record` and passed on."""

    rb: RolloutBatch
    """The rollout (responses, masks, rollout log-probs; on ``exact`` the trainer's, V1)."""
    rewards: list
    """The task's :class:`~tailtheory.engine.tasks.Reward` of each response, ``B`` of them."""
    b: PolicyBatch
    """The policy batch: pi_old, pi_train, pi_roll, ``log_rho``, sum p^2, token KL, TRM's
    sampled-token acceptance; the stages add advantages and weights."""
    stats: dict
    """The ``pi_old`` forward's ``token_stats`` (``tailtheory.core.stats``): entropy, pruned mass."""
    vocab_metrics: dict
    """What the vocab stage (DVP) reported."""
    live_logp: torch.Tensor | None
    """``(B, T)`` differentiable log-probs of that forward, for the first pass (or ``None``)."""


def step_record(model, rb, rewards, group_ids, cfg: TrainConfig, step: int,
                live: bool) -> StepRecord:
    """One trainer forward at the current weights gives ``pi_old`` (recompute) or ``pi_train``
    (bypass), every per-token statistic and ``log_rho``; with ``live`` it keeps its graph for
    the first update pass (same weights: the same numbers as a second forward)."""
    mask, spec = rb.mask, cfg.spec
    keep, vocab_metrics = None, {}
    if spec.vocab:
        probe = PolicyBatch(logp=rb.logp, old_logp=rb.logp, roll_logp=rb.logp, mask=mask,
                            keep=rb.keep, logits=rb.logits, tokens=rb.response)
        keep, vocab_metrics = spec.vocab.fn(probe, cfg)
    exact = _exact_in_trainer(cfg)
    self_ref = exact and _wants_exact_kl(cfg)
    with torch.set_grad_enabled(live):
        st, z = _forward_stats(model, rb, keep, cfg, step, ref=rb.logits, self_ref=self_ref)
    ref = z if self_ref else rb.logits
    train_logp = st["logp"].detach().masked_fill(~mask, 0.0)
    if exact:  # V1: the exact path's rollout log-probs are this forward's
        rb.logp, rb.logits = train_logp, ref
    old_logp = train_logp if cfg.pi_old == "recompute" else rb.logp
    b = PolicyBatch(logp=train_logp, old_logp=old_logp, roll_logp=rb.logp, mask=mask,
                    rewards=torch.tensor([r.total for r in rewards], dtype=torch.float64,
                                         device=mask.device),
                    group_ids=group_ids, sum_p2=st["sum_p2"], tok_kl=st.get("kl"),
                    logits=rb.logits, keep=keep, tokens=rb.response,
                    train_logp=train_logp)              # corrections use pi_train / pi_roll
    b = replace(b, trm_accept=trm_sampled_keep(mask, b.log_rho, cfg))
    return StepRecord(rb, rewards, b, st, vocab_metrics, st["logp"] if live else None)


def _monitor(rec: StepRecord) -> dict:
    """The step's metrics that no stage reports: rewards, lengths, entropy, mismatch, TRM."""
    b, rb, rw = rec.b, rec.rb, rec.rewards
    m, log_rho = b.mask, b.log_rho.double()                           # log pi_train / pi_roll
    lens = m.sum(-1)                                                    # (B,)
    return {"reward/mean": float(b.rewards.mean()),
            "reward/accuracy": sum(r.correct for r in rw) / len(rw),
            "reward/format": sum(r.format_ok for r in rw) / len(rw),
            "rollout/tokens": int(rb.mask.sum()), "rollout/len_mean": float(lens.double().mean()),
            "rollout/len_max": int(lens.max()),
            "rollout/len_median": float(lens.double().median()),
            "policy/entropy": _mean(rec.stats["entropy"], m),
            "mismatch/abs_mean": _mean(log_rho.abs(), m),
            "mismatch/abs_max": float((log_rho.abs() * m).max()),
            "mismatch/k1": _mean(k1(log_rho), m), "mismatch/k3": _mean(k3(log_rho), m),
            "trm/accept_rate": float(b.trm_accept.double().mean()),
            "dvp/pruned_mass": _mean(rec.stats["pruned_mass"], m) if b.keep is not None else 0.0,
            "adv/zero_var_frac": float(zero_variance_groups(b.rewards, b.group_ids).double()
                                       .mean())}


def zero_variance_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``(n_groups,)`` bool: the groups whose rewards are all equal (a group baseline gives them
    zero advantage). Shapes: rewards (B,), group_ids (B,) with ids ``0 .. n_groups - 1``."""
    n = int(group_ids.max()) + 1
    lo = torch.full((n,), float("inf"), dtype=rewards.dtype, device=rewards.device)
    hi = torch.full((n,), float("-inf"), dtype=rewards.dtype, device=rewards.device)
    lo = lo.scatter_reduce(0, group_ids, rewards, "amin")
    hi = hi.scatter_reduce(0, group_ids, rewards, "amax")
    return lo == hi


def update(model, optimizer, rb, b: PolicyBatch, cfg: TrainConfig, step: int, *,
           logp: torch.Tensor | None = None) -> dict:
    """One optimiser step on the active tokens of ``b``; returns the loss metrics.

    ``logp`` (B, T), differentiable: the trainer's log-probs at the current weights when the
    caller already has them (the first pass reuses the ``pi_old`` forward); else one forward.
    """
    optimizer.zero_grad(set_to_none=True)
    if logp is None:
        logp = _forward_stats(model, rb, b.keep, cfg, step)[0]["logp"]
    loss, metrics = cfg.spec.loss.fn(replace(b, logp=logp.masked_fill(~b.mask, 0.0)), cfg)
    _finite(loss.detach(), "loss", step)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    _finite(gnorm, "gradient norm", step)
    optimizer.step()
    for p in model.parameters():
        _finite(p.detach(), "weights", step)
    return {**metrics, "grad/norm": float(gnorm)}


def rollout_step(step: int, cfg: TrainConfig, task, model, engine, generator):
    """``(problems, rollout batch, group_ids (B,))`` of step ``step``: ``G`` responses each to
    the step's problems (:data:`PROBLEM_SEED`), sampled by ``engine`` synced to ``model``."""
    problems = task.problems(cfg.prompts_per_step, seed=PROBLEM_SEED + 100_000 * cfg.seed + step)
    prompts = [p.prompt_ids for p in problems for _ in range(cfg.group_size)]
    group_ids = torch.arange(len(problems)).repeat_interleave(cfg.group_size)   # (B,)
    group_ids = group_ids.to(next(model.parameters()).device)
    engine.sync(model)
    try:
        rb = engine.generate(prompts, eos_id=task.eos_id, pad_id=task.pad_id,
                             generator=generator)
    except RuntimeError as exc:  # the sampler met NaN / inf probabilities
        raise TrainingDiverged(f"rollout failed at step {step} ({exc}); the run stopped and its "
                               f"last good checkpoint is kept") from exc
    return problems, rb, group_ids


def train_step(step: int, cfg: TrainConfig, task, model, engine, optimizer,
               generator) -> tuple[dict, StepRecord]:
    """One GRPO step. Returns ``(metrics, the step's record)`` (the record for the token dump)."""
    t0 = time.perf_counter()
    problems, rb, group_ids = rollout_step(step, cfg, task, model, engine, generator)
    t_roll = time.perf_counter() - t0
    G, spec = cfg.group_size, cfg.spec
    rw = [task.reward(problems[i // G], rb.response[i]) for i in range(rb.response.shape[0])]
    rec = step_record(model, rb, rw, group_ids, cfg, step, live=_SHARE_FORWARD)
    b = rec.b
    adv, m_adv = advantages(spec, b, cfg)
    weight, m_cor = correction_weight(spec, replace(b, adv=adv), cfg)
    b = replace(b, adv=adv.to(b.old_logp.dtype), weight=weight)
    groups, m_sched = passes(spec, b, cfg)
    loss_mask = b.mask
    if cfg.filter_zero_var:  # DAPO (arXiv 2503.14476) drops such groups and samples anew
        flat = zero_variance_groups(b.rewards, b.group_ids)[b.group_ids]          # (B,)
        loss_mask = b.mask & ~flat[:, None]  # out of the loss's denominators too
    # A pass with no active token is skipped: no forward, no optimiser step (AdamW's momentum and
    # step count would still move the weights), no share of the metric averages.
    per_pass = []
    before = [p.detach().clone() for p in model.parameters()]
    for _, active in groups:  # the first pass run is at pi_old's weights: reuse its forward
        if (active & loss_mask).any():
            per_pass.append(update(model, optimizer, rb, replace(b, active=active, mask=loss_mask),
                                   cfg, step, logp=None if per_pass else rec.live_logp))
    metrics = {"step": step, **_monitor(rec), **rec.vocab_metrics, **m_adv, **m_cor, **m_sched,
               **_pass_mean(per_pass), "update/rel_size": _rel_change(before, model),
               "time/rollout_s": t_roll,
               "time/step_s": time.perf_counter() - t0}
    return metrics, replace(rec, b=b)


def _rel_change(before: list[torch.Tensor], model) -> float:
    """``||theta - before|| / ||before||`` over every parameter (float64 sums)."""
    num = sum(float((p.detach().double() - b.double()).square().sum())
              for p, b in zip(model.parameters(), before))
    den = sum(float(b.double().square().sum()) for b in before)
    return (num / den) ** 0.5 if den > 0 else 0.0


def _pass_mean(per_pass: list[dict]) -> dict:
    """Loss metrics averaged over the passes with a non-zero weight on some token; grad norm
    over every pass run (empty passes are never run); zeros when no pass ran."""
    if not per_pass:
        return {**{k: 0.0 for k in LOSS_METRICS}, "grad/norm": 0.0}
    live = [m for m in per_pass if m["loss/active_frac"] > 0] or per_pass
    out = {k: sum(m[k] for m in live) / len(live) for k in live[0]}
    out["grad/norm"] = sum(m["grad/norm"] for m in per_pass) / len(per_pass)
    return out


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


def train(cfg: TrainConfig, resume: bool = False, progress: bool = True, task=None) -> Path:
    """Run (or, with ``resume``, continue) ``cfg`` and return the run directory ``cfg.out``.

    The directory is checked, locked and marked first (rules in :mod:`tailtheory.engine.rundir`);
    then the warm start of a ``warm`` model is found or trained (one outside its accuracy window
    raises :class:`~tailtheory.engine.warm_cache.WarmStartMissed`). torch's thread count is
    restored on return. ``task`` replaces the task named by ``cfg.task`` (tests pass one with a denser reward).
    """
    from tailtheory.engine.rundir import open_run
    from tailtheory.engine.threads import resolve_threads, torch_threads

    from tailtheory.engine.devices import resolve_device

    resolve_threads(cfg.threads, 0)  # a bad count, or cuda without a GPU, fails before any work
    resolve_device(cfg.device)
    with open_run(cfg.out, resume), torch_threads(torch.get_num_threads()):
        if cfg.model == "warm" and task is None:
            from tailtheory.engine.warm_cache import warm_start

            warm_start(warm_config(cfg), progress=progress, threads=cfg.threads)
        return _train(cfg, resume, progress, task)


def _train(cfg: TrainConfig, resume: bool, progress: bool, task) -> Path:
    from tqdm.auto import tqdm

    from tailtheory.core.models import num_params
    from tailtheory.engine.devices import resolve_device
    from tailtheory.engine.threads import resolve_threads

    run, spec = Path(cfg.out), cfg.spec
    device = resolve_device(cfg.device)
    task = task or load_task(cfg)
    model = load_model(cfg, task).to(device)
    torch.set_num_threads(resolve_threads(cfg.threads, num_params(model), device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                  foreach=True)  # bitwise the per-tensor loop, faster on CPU
    generator = torch.Generator(device).manual_seed(cfg.seed)
    start = _restore(run, cfg, model, optimizer, generator) if resume else _fresh(run)
    atomic_write_json(run / "config.json", cfg.to_dict())
    engine = RolloutEngine(model, rollout_config(cfg, task))
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=f"train {spec.label}",
               unit="step", disable=not progress)
    for step in bar:
        acc = _evaluate(step, cfg, task, model)
        metrics, rec = train_step(step, cfg, task, model, engine, optimizer, generator)
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
    from tailtheory.engine.evaluate import held_out_accuracy

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


def _fresh(run: Path) -> int:
    """Step 0 of a new run (``open_run`` checked that ``run`` holds no earlier run's files)."""
    return 0


def read_metrics(run: str | Path) -> list[dict]:
    """The lines of ``RUN/metrics.jsonl`` (less a last line torn by an interrupted write)."""
    return ckpt_io.read_metrics(run)
