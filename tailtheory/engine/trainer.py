"""The GRPO loop: rollout -> reward -> advantages -> pi_old -> update(s) -> metrics.

Source: GRPO with the methods of LOPTI (L2, L3), DVP (P3), TRM (T12), OTB and TIM (V1-V4);
see ``engine/losses.py`` for the registry. One step:

1. ``P`` prompts, ``G`` responses each, sampled by the rollout engine (a real mismatch on the
   ``bf16`` / ``fp16`` / ``kv`` paths; none on ``exact``) with the rollout log-probs.
2. Rewards from the task; a trainer forward at the current weights gives ``pi_old``
   (``recompute``) and the mismatch metrics; ``bypass`` uses the rollout log-probs as ``pi_old``.
   That forward keeps its graph: the first update pass runs at the same weights, so it reuses
   it (its detached log-probs are bitwise what a second forward would give).
3. Advantages (group or OTB, then AR), correction weights (TIS / MIS / IcePop / TRM), the passes
   (one, or Lopti's two), one clipped-surrogate update per pass.
4. One JSON line to ``RUN/metrics.jsonl`` (keys in :data:`METRIC_KEYS`); a checkpoint every
   ``checkpoint_every`` steps.

Shapes: ``B = P * G`` responses of ``T`` tokens; per-token ``(B, T)``, logits ``(B, T, V)``.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from tailtheory.core.io import atomic_write_bytes, atomic_write_json
from tailtheory.mismatch.logprob import k1, k3
from tailtheory.engine import checkpoint as ckpt_io
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.losses import PolicyBatch, advantages, correction_weight, parse_methods, passes
from tailtheory.engine.rollout import RolloutConfig, RolloutEngine, response_logits
from tailtheory.core.stats import token_stats

METRIC_KEYS = {
    "step": "0-based step index",
    "reward/mean": "mean task reward of the step's responses",
    "reward/accuracy": "fraction of responses with the correct answer",
    "policy/entropy": "mean entropy of pi_old over response tokens",
    "mismatch/abs_mean": "mean |log pi_roll - log pi_train| over response tokens (V2)",
    "mismatch/abs_max": "max of the same",
    "mismatch/k1": "mean k1 = -log rho, rho = pi_train / pi_roll (T12)",
    "mismatch/k3": "mean k3 = rho - 1 - log rho (T12)",
    "trm/accept_rate": "TRM's acceptance as a monitor (k2/k3 of log pi_train / pi_roll); the trm "
                       "correction's own rate is trm/kept_frac",
    "dvp/pruned_mass": "mean pruned mass of the trainer's distribution (0 without dvp)",
    "loss/clipfrac": "fraction of active tokens where the clip binds (mean over passes)",
    "grad/norm": "parameter-gradient norm before clipping (mean over passes)",
    "time/step_s": "wall-clock seconds of the step",
}
"""Keys every line of ``metrics.jsonl`` has; methods add their own namespaced keys."""

PROBLEM_SEED = 1000
"""Problem stream of step ``s``: generator seed ``PROBLEM_SEED + 100_000 * seed + s`` (the warm
start uses seeds 100 and 101, so RL never trains on its problems)."""


_SHARE_FORWARD = True
"""The ``pi_old`` forward keeps its graph and serves the first update pass (both run at the same
weights, so the numbers are those of two forwards); False runs a second forward (tests)."""


class TrainingDiverged(ValueError):
    """A NaN or inf in the loss, the logits or the weights; the last good checkpoint is kept."""


def load_task(cfg: TrainConfig):
    from tailtheory.engine.tasks import get_task

    return get_task(cfg.task, seed=cfg.seed, **_task_kwargs(cfg))


def _task_kwargs(cfg: TrainConfig) -> dict:
    return {"n_people": cfg.n_people} if cfg.task == "kk" and cfg.n_people != 3 else {}


def load_model(cfg: TrainConfig, task):
    """The float32 trainer model named by ``cfg.model`` (see :class:`TrainConfig`)."""
    from tailtheory.core.models import load_lm, tiny_lm

    if cfg.model == "tiny":
        model = tiny_lm(vocab_size=task.vocab_size, hidden=32, layers=1, heads=2, kv_heads=1,
                        seed=cfg.seed)
    elif cfg.model == "warm":
        from tailtheory.engine.sft import SFTConfig, warm_start

        model = load_lm(warm_start(SFTConfig(task=cfg.task, task_kwargs=_task_kwargs(cfg))),
                        device="cpu")
    else:
        model = load_lm(cfg.model, device="cpu")
    return model.float().eval()


def rollout_config(cfg: TrainConfig, spec, task) -> RolloutConfig:
    exact_kl = any(m.name == "trm" for m in spec.corrections) and cfg.trm_estimator == "exact"
    return RolloutConfig(path=cfg.rollout, temperature=cfg.temperature,
                         max_new_tokens=cfg.max_new_tokens or task.max_response_len,
                         prune_rule=cfg.dvp_rule if spec.vocab else None, rho=cfg.dvp_rho,
                         return_logits=exact_kl)


def _finite(x: torch.Tensor, what: str, step: int) -> None:
    if not torch.isfinite(x).all():
        raise TrainingDiverged(f"non-finite {what} at step {step}; the run stopped and its last "
                               f"good checkpoint is kept")


def _mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x.double() * mask).sum() / mask.sum().clamp(min=1))


def old_policy(model, rb, rewards, group_ids, spec, cfg, step):
    """``pi_old`` and the step's monitoring statistics. Returns ``(PolicyBatch, keep, metrics)``."""
    b, keep, metrics, _ = _old_policy(model, rb, rewards, group_ids, spec, cfg, step, live=False)
    return b, keep, metrics


def _old_policy(model, rb, rewards, group_ids, spec, cfg, step, live: bool):
    """:func:`old_policy`; with ``live`` its forward keeps the graph, and the differentiable
    ``logp (B, T)`` comes back too, for the first update pass (same weights: the same numbers)."""
    hp, mask = cfg.method_params(), rb.mask
    keep, metrics = None, {}
    if spec.vocab:
        probe = PolicyBatch(logp=rb.logp, old_logp=rb.logp, roll_logp=rb.logp, mask=mask,
                            keep=rb.keep, logits=rb.logits, tokens=rb.response)
        keep, metrics = spec.vocab.fn(probe, hp)
    with torch.set_grad_enabled(live):
        z = response_logits(model, rb)                                   # (B, T, V)
        _finite(z.detach(), "logits", step)
        st = token_stats(z, rb.response, ref_logits=rb.logits, keep=keep,
                         temperature=cfg.temperature)
    train_logp = st["logp"].detach().masked_fill(~mask, 0.0)
    old_logp = train_logp if cfg.pi_old == "recompute" else rb.logp
    b = PolicyBatch(logp=train_logp, old_logp=old_logp, roll_logp=rb.logp, mask=mask,
                    rewards=rewards, group_ids=group_ids, sum_p2=st["sum_p2"],
                    tok_kl=st.get("kl"), logits=rb.logits, keep=keep, tokens=rb.response,
                    train_logp=train_logp)              # corrections use pi_train / pi_roll
    log_rho = (train_logp - rb.logp).double()                          # log pi_train / pi_roll
    metrics.update(_monitor(b, log_rho, st, keep, cfg))
    return b, keep, metrics, (st["logp"] if live else None)


def _monitor(b: PolicyBatch, log_rho, st, keep, cfg) -> dict:
    from tailtheory.trm.mask import trm_mask

    m = b.mask
    accept = trm_mask(m, cfg.trm_mode, log_ratio=log_rho, delta_max=cfg.trm_delta_max,
                      delta_avg=cfg.trm_delta_avg)
    return {"policy/entropy": _mean(st["entropy"], m),
            "mismatch/abs_mean": _mean(log_rho.abs(), m),
            "mismatch/abs_max": float((log_rho.abs() * m).max()),
            "mismatch/k1": _mean(k1(log_rho), m), "mismatch/k3": _mean(k3(log_rho), m),
            "trm/accept_rate": float(accept.double().mean()),
            "dvp/pruned_mass": _mean(st["pruned_mass"], m) if keep is not None else 0.0}


def update(model, optimizer, rb, b: PolicyBatch, keep, spec, cfg, step, *,
           logp: torch.Tensor | None = None) -> dict:
    """One optimiser step on the active tokens of ``b``; returns the loss metrics.

    ``logp`` (B, T), differentiable: the trainer's log-probs at the current weights when the
    caller already has them (the first pass reuses the ``pi_old`` forward); else one forward.
    """
    optimizer.zero_grad(set_to_none=True)
    if logp is None:
        z = response_logits(model, rb)
        _finite(z.detach(), "logits", step)
        logp = token_stats(z, rb.response, keep=keep, temperature=cfg.temperature)["logp"]
    loss, metrics = spec.loss.fn(replace(b, logp=logp.masked_fill(~b.mask, 0.0)),
                                 cfg.method_params())
    _finite(loss.detach(), "loss", step)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    _finite(gnorm, "gradient norm", step)
    optimizer.step()
    for p in model.parameters():
        _finite(p.detach(), "weights", step)
    return {**metrics, "grad/norm": float(gnorm)}


def train_step(step: int, cfg: TrainConfig, spec, task, model, engine, optimizer,
               generator) -> tuple[dict, dict]:
    """One GRPO step. Returns ``(metrics, per-token arrays for the optional dump)``."""
    t0 = time.perf_counter()
    problems = task.problems(cfg.prompts_per_step, seed=PROBLEM_SEED + 100_000 * cfg.seed + step)
    G = cfg.group_size
    prompts = [p.prompt_ids for p in problems for _ in range(G)]
    group_ids = torch.arange(len(problems)).repeat_interleave(G)        # (B,)
    engine.sync(model)
    try:
        rb = engine.generate(prompts, eos_id=task.eos_id, pad_id=task.pad_id,
                             generator=generator)
    except RuntimeError as exc:  # the sampler met NaN / inf probabilities
        raise TrainingDiverged(f"rollout failed at step {step} ({exc}); the run stopped and its "
                               f"last good checkpoint is kept") from exc
    t_roll = time.perf_counter() - t0
    rw = [task.reward(problems[i // G], rb.response[i]) for i in range(len(prompts))]
    R = torch.tensor([r.total for r in rw], dtype=torch.float64)         # (B,)
    b, keep, metrics, live = _old_policy(model, rb, R, group_ids, spec, cfg, step,
                                         live=_SHARE_FORWARD)
    hp = cfg.method_params()
    adv, m_adv = advantages(spec, b, hp)
    weight, m_cor = correction_weight(spec, replace(b, adv=adv), hp)
    b = replace(b, adv=adv.to(b.old_logp.dtype), weight=weight)
    groups, m_sched = passes(spec, b, hp)
    # A pass with no active token is skipped: no forward, no optimiser step (AdamW's momentum and
    # step count would still move the weights), no share of the metric averages.
    per_pass = []
    for _, active in groups:  # the first pass run is at pi_old's weights: reuse its forward
        if (active & b.mask).any():
            per_pass.append(update(model, optimizer, rb, replace(b, active=active), keep, spec,
                                   cfg, step, logp=None if per_pass else live))
    loss_m = _pass_mean(per_pass)
    metrics = {"step": step, "reward/mean": float(R.mean()),
               "reward/accuracy": sum(r.correct for r in rw) / len(rw),
               "reward/format": sum(r.format_ok for r in rw) / len(rw),
               "rollout/tokens": int(rb.mask.sum()), **metrics, **m_adv, **m_cor, **m_sched,
               **loss_m, "time/rollout_s": t_roll, "time/step_s": time.perf_counter() - t0}
    return metrics, {"b": b, "rb": rb}


def _pass_mean(per_pass: list[dict]) -> dict:
    """Loss metrics averaged over the passes with a non-zero weight on some token; grad norm
    over every pass run (empty passes are never run); zeros when no pass ran."""
    if not per_pass:
        return {"loss/clipfrac": 0.0, "grad/norm": 0.0, "loss/active_frac": 0.0}
    live = [m for m in per_pass if m["loss/active_frac"] > 0] or per_pass
    out = {k: sum(m[k] for m in live) / len(live) for k in live[0]}
    out["grad/norm"] = sum(m["grad/norm"] for m in per_pass) / len(per_pass)
    return out


def dump_tokens(run: Path, step: int, b: PolicyBatch, rb) -> Path:
    """Per-token probabilities, advantages and log-ratios of one step to parquet (atomic)."""
    import io

    import pandas as pd

    seq, t = b.mask.nonzero(as_tuple=True)
    col = lambda x: x[seq, t].detach().double().numpy()  # noqa: E731
    df = pd.DataFrame({"step": step, "seq": seq.numpy(), "t": t.numpy(),
                       "group": b.group_ids[seq].numpy(), "token": rb.response[seq, t].numpy(),
                       "p_old": col(b.old_logp.exp()), "logp_old": col(b.old_logp),
                       "logp_roll": col(b.roll_logp), "log_ratio": col(b.logp - b.roll_logp),
                       "adv": col(b.adv), "weight": col(b.weight)})
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return atomic_write_bytes(Path(run) / "tokens" / f"step_{step:06d}.parquet", buf.getvalue())


def train(cfg: TrainConfig, resume: bool = False, progress: bool = True, task=None) -> Path:
    """Run (or, with ``resume``, continue) ``cfg`` and return the run directory.

    ``task`` replaces the task named by ``cfg.task`` (tests pass one with a denser reward).
    """
    from tqdm.auto import tqdm

    run, spec = Path(cfg.out), parse_methods(cfg.method)
    if not resume and (run / ckpt_io.CHECKPOINT).exists():
        raise ValueError(f"{run} already holds a run; pass --resume or choose another --out")
    task = task or load_task(cfg)
    model = load_model(cfg, task)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                  foreach=True)  # bitwise the per-tensor loop, faster on CPU
    generator = torch.Generator().manual_seed(cfg.seed)
    start = _restore(run, cfg, model, optimizer, generator) if resume else _fresh(run)
    atomic_write_json(run / "config.json", cfg.to_dict())
    engine = RolloutEngine(model, rollout_config(cfg, spec, task))
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=f"train {spec.label}",
               unit="step", disable=not progress)
    for step in bar:
        metrics, batch = train_step(step, cfg, spec, task, model, engine, optimizer, generator)
        ckpt_io.append_metrics(run, metrics)
        if cfg.dump_tokens:
            dump_tokens(run, step, batch["b"], batch["rb"])
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
            ckpt_io.save_checkpoint(run, step + 1, model, optimizer, generator, cfg)
        bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}",
                        mismatch=f"{metrics['mismatch/abs_mean']:.1e}")
    return run


def _restore(run: Path, cfg: TrainConfig, model, optimizer, generator) -> int:
    """Load the checkpoint of ``run`` into the objects; drop metric lines past it."""
    state = ckpt_io.load_checkpoint(run, cfg)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    ckpt_io.set_rng_state(state["rng"], generator)
    ckpt_io.truncate_metrics(run, state["step"])
    return state["step"]


def _fresh(run: Path) -> int:
    run.mkdir(parents=True, exist_ok=True)
    (run / ckpt_io.METRICS).unlink(missing_ok=True)
    return 0


def read_metrics(run: str | Path) -> list[dict]:
    """The lines of ``RUN/metrics.jsonl``."""
    text = (Path(run) / ckpt_io.METRICS).read_text()
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
