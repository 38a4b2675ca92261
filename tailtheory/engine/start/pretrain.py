"""The corpus LM's pretraining loop: AdamW on random windows of a token stream, with linear
warm-up and cosine decay, the held-out loss every ``eval_every`` steps, and checkpoints that a
stopped build continues from (:mod:`tailtheory.engine.start.resume`). The config, corpus and cache
are :mod:`tailtheory.engine.start.corpus_lm`'s; ``cfg`` below is its ``CorpusLMConfig``."""

from __future__ import annotations

import math
import sys
import time

import torch

from tailtheory.engine.start.resume import Resume


def windows(stream: torch.Tensor, L: int, n: int | None = None) -> torch.Tensor:
    """The first ``n`` (all when None) non-overlapping windows of ``L`` tokens. -> (n, L)."""
    k = stream.numel() // L if n is None else n
    if k < 1 or k * L > stream.numel():
        raise ValueError(f"the held-out stream has {stream.numel()} tokens: fewer than "
                         f"{max(k, 1)} window(s) of {L}; use fewer or shorter windows")
    return stream[:k * L].view(k, L)


@torch.no_grad()
def heldout_loss(model, stream: torch.Tensor, L: int, n: int) -> float:
    """Mean next-token cross-entropy (nats) over the first ``n`` held-out windows of ``L``."""
    dev = next(model.parameters()).device
    x = windows(stream, L, n)
    was = model.training
    model.eval()
    total = sum(model(input_ids=b.to(dev), labels=b.to(dev)).loss.item() * len(b)
                for b in x.split(16))                     # every row has L - 1 predictions
    model.train(was)
    return total / len(x)


def lr_factor(cfg):
    """The learning-rate multiplier of step ``step``: linear warm-up over ``cfg.warmup`` steps,
    then cosine decay to a tenth at ``cfg.steps``."""
    def f(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))
    return f


def pretrain(cfg, model, train: torch.Tensor, held: torch.Tensor, progress: bool,
             resume: Resume):
    """AdamW on random windows of ``train``, continuing ``resume``'s checkpoint if it has one;
    ``(history, seconds)`` (seconds include the checkpoint's)."""
    from tqdm.auto import tqdm

    if train.numel() <= cfg.seq_len:
        raise ValueError(f"the training stream has {train.numel()} tokens, not more than "
                         f"seq_len = {cfg.seq_len}; raise corpus_bytes")
    dev = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    g = torch.Generator().manual_seed(cfg.seed)
    offsets = torch.arange(cfg.seq_len)
    done, history, spent = resume.restore(model, opt, g, sched)
    t0 = time.perf_counter() - spent
    bar = tqdm(range(done + 1, cfg.steps + 1), initial=done, total=cfg.steps, desc="corpus lm",
               unit="step", disable=not progress, file=sys.stderr)
    for step in bar:
        start = torch.randint(train.numel() - cfg.seq_len + 1, (cfg.batch_size, 1), generator=g)
        x = train[start + offsets].to(dev)                                   # (B, L)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            ev = heldout_loss(model, held, cfg.seq_len, cfg.eval_windows)
            history.append({"step": step, "train_loss": loss.item(), "heldout_loss": ev})
            bar.set_postfix(loss=f"{loss.item():.3f}", heldout=f"{ev:.3f}")
        resume.maybe_save(step, model, opt, g, history, time.perf_counter() - t0, sched)
    bar.close()
    return history, time.perf_counter() - t0
