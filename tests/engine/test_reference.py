"""The one-file GRPO step (``tailtheory/engine/reference.py``) against the engine's ``train_step``.

Both run the recorded 3-step case ``grpo/exact/fast`` of ``tests/engine/data/metrics_3_steps.json``
(its config as ``tests/engine/test_trainer.py``'s ``_recorded_run`` builds it) on this machine,
from the same starting weights (the engine's, copied at its first step) and a generator seeded
alike; nothing here is compared with the stored numbers. A second case runs the same config with
``G = 4`` responses to 4 prompts, up to 30 tokens: there rows end early (the sampler then draws
for the live rows only) and the loss is not 0. What "equal" means:

- sampled token ids (and masks): exactly, at every step (the same draws of the same generator
  from logits equal to float32 rounding: reference.py's module docstring);
- advantages, gradient norm before clipping, final weights' sum: ``FLOAT32_RTOL``; the loss:
  ``LOSS_ATOL`` (both of ``tests/engine/test_trainer.py``, where their sizes are argued).
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from tailtheory.engine import advantages, reference, trainer
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.threads import model_threads
from tests.engine.test_trainer import FLOAT32_RTOL, LOSS_ATOL, REGRESSION, SMALL, DenseKK

CASE = "grpo/exact/fast"
"""The recorded run the reference reproduces: plain GRPO on the ``exact`` path, ``fast`` decoder."""

CASES = {"recorded": {},
         "early-stops": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 30,
                         "eval_every": 0}}
"""Overrides of :data:`CASE`'s config: none, and one whose rows end before the cap (measured: one
row of 16 at each step, after 27, 12 and 1 tokens) with losses of 2e-3 to 8e-2."""


def weight_sum(model) -> float:
    """The sum of every floating weight, in float64 (as ``_recorded_run`` sums a checkpoint)."""
    return float(sum(v.double().sum() for v in model.state_dict().values()
                     if v.is_floating_point()))


@pytest.fixture(scope="module", params=sorted(CASES))
def engine(request, tmp_path_factory) -> dict:
    """The engine's 3 steps of :data:`CASE` with the overrides of one of :data:`CASES`, through
    ``train``: its config, task, starting model and optimiser settings (at step 0), per step
    the sampled tokens, masks, advantages and metrics, and its final weights' sum."""
    seen: dict = {"case": request.param, "steps": []}
    real = trainer.train_step

    def recording(step, cfg, task, model, engine, optimizer, generator, **kw):
        if step == 0:
            seen.update(cfg=cfg, task=task, model=model, start=copy.deepcopy(model),
                        adam=dict(optimizer.defaults))
        metrics, rec = real(step, cfg, task, model, engine, optimizer, generator, **kw)
        seen["steps"].append({"response": rec.rb.response.clone(), "mask": rec.rb.mask.clone(),
                              "A": rec.b.adv[:, 0].clone(), "loss": metrics["loss/policy"],
                              "grad_norm": metrics["grad/norm"]})
        return metrics, rec

    rec = json.loads(REGRESSION.read_text())[CASE]
    out = tmp_path_factory.mktemp("engine") / "r"
    cfg = TrainConfig(**{**SMALL, "rollout_backend": "hf", **rec["config"],
                         **CASES[request.param]}, steps=3, checkpoint_every=3, out=str(out))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer, "train_step", recording)
        trainer.train(cfg, progress=False, task=DenseKK())
    seen["weight_sum"] = weight_sum(seen.pop("model"))
    return seen


def reference_run(engine: dict) -> dict:
    """The reference's steps on the engine's config, task and starting weights, with a generator
    seeded as the engine's and its thread count (``trainer.train``): per step its outputs; its
    final weights' sum."""
    cfg, task = engine["cfg"], engine["task"]
    model = copy.deepcopy(engine["start"])
    adam = reference.adamw_state(list(model.parameters()))
    generator = torch.Generator("cpu").manual_seed(cfg.seed)
    with model_threads(model, cfg.threads):      # the engine's count: one for a tiny model
        steps = [reference.grpo_step(model, adam, task, trainer.step_problems(s, cfg, task),
                                     generator, G=cfg.group_size,
                                     T=cfg.max_new_tokens or task.max_response_len,
                                     tau=cfg.temperature, eps_low=cfg.eps_low,
                                     eps_high=cfg.eps_high, lr=cfg.lr,
                                     weight_decay=cfg.weight_decay,
                                     max_grad_norm=cfg.max_grad_norm)
                 for s in range(cfg.steps)]
    return {"steps": steps, "weight_sum": weight_sum(model)}


def disagreements(got: dict, want: dict) -> list[str]:
    """What of the reference's run ``got`` is outside the stated tolerances of the engine's
    ``want`` (module docstring), one line each."""
    bad = []
    for s, (g, w) in enumerate(zip(got["steps"], want["steps"], strict=True)):
        if not (torch.equal(g["response"], w["response"]) and torch.equal(g["mask"], w["mask"])):
            bad.append(f"tokens at step {s}")
        if g["A"].tolist() != pytest.approx(w["A"].tolist(), rel=FLOAT32_RTOL, abs=1e-12):
            bad.append(f"advantages at step {s}: {g['A'].tolist()} against {w['A'].tolist()}")
        if abs(g["loss"] - w["loss"]) > LOSS_ATOL:
            bad.append(f"loss at step {s}: {g['loss']} against {w['loss']}")
        if g["grad_norm"] != pytest.approx(w["grad_norm"], rel=FLOAT32_RTOL):
            bad.append(f"grad norm at step {s}: {g['grad_norm']} against {w['grad_norm']}")
    if got["weight_sum"] != pytest.approx(want["weight_sum"], rel=FLOAT32_RTOL):
        bad.append(f"weight sum: {got['weight_sum']} against {want['weight_sum']}")
    return bad


def test_reference_step_reproduces_train_step(engine):
    """The reference, run on the engine's config from its starting weights, samples the engine's
    tokens at every step and gives its advantages, losses, gradient norms and final weights
    within the stated tolerances; its constants are the engine's (GRPO's eps, the optimiser's
    settings as ``trainer._train`` builds AdamW)."""
    cfg = engine["cfg"]
    assert (cfg.method, cfg.rollout, cfg.rollout_backend, cfg.steps) == ("grpo", "exact", "fast", 3)
    ends = [bool((~s["mask"][:, -1]).any()) for s in engine["steps"]]
    assert any(ends) == (engine["case"] == "early-stops")       # the case is what it says
    assert reference.GRPO_EPS == advantages.GRPO_EPS
    assert engine["adam"] == {**engine["adam"], "lr": cfg.lr, "weight_decay": cfg.weight_decay,
                              "betas": reference.ADAM_BETAS, "eps": reference.ADAM_EPS,
                              "amsgrad": False, "maximize": False}
    ref = reference_run(engine)
    assert not disagreements(ref, engine), disagreements(ref, engine)
    assert all(s["grad_norm"] > 0 for s in ref["steps"])       # every step a real update
    assert ref["weight_sum"] != weight_sum(engine["start"])


def test_a_loss_scaled_by_1e3_is_seen(engine, monkeypatch):
    """The check can fail: the reference's loss scaled by 1 + 1e-3 (a slip of a refactor) moves
    the gradient norm before clipping by 1e-3, ten times ``FLOAT32_RTOL``, at every step.

    The gradient norm is what sees it in both cases, and all that does in the recorded one. There
    the loss is 0 at every step, scaled or not: at the step's one update the ratio is exactly 1,
    so the loss is ``-mean_t A``, and with every response 3 tokens long each group's advantages
    cancel. Nor do the tokens or the weights move: clipping then AdamW are blind to the
    gradient's scale (AdamW's step is ``m / sqrt(v)``, up to its eps). Hence the gradient norm
    among the compared numbers. In the other case the losses of steps 1 and 2 move by 2.6e-5
    and 8.4e-5, past ``LOSS_ATOL`` too."""
    real = reference.grpo_loss
    monkeypatch.setattr(reference, "grpo_loss", lambda *a, **kw: real(*a, **kw) * (1 + 1e-3))
    bad = [b.split(":")[0] for b in disagreements(reference_run(engine), engine)]
    assert {f"grad norm at step {s}" for s in range(3)} <= set(bad), bad
    assert all(b.startswith(("grad norm", "loss")) for b in bad), bad
    assert any(b.startswith("loss") for b in bad) == (engine["case"] == "early-stops"), bad


def test_clip_and_adamw_are_torchs():
    """``clip_grad_norm`` and ``adamw_step`` are ``torch.nn.utils.clip_grad_norm_`` and
    ``torch.optim.AdamW`` (foreach, as the engine builds it) over three steps, weight decay on,
    to float32 rounding (bitwise on the CPU this was written on: the same elementwise ops)."""
    gen = torch.Generator().manual_seed(0)
    want = [torch.randn(64, 32, generator=gen), torch.randn(7, generator=gen)]
    got = [w.clone() for w in want]
    opt = torch.optim.AdamW(want, lr=3e-3, weight_decay=0.1, foreach=True)
    state = reference.adamw_state(got)
    for _ in range(3):
        for w, g in zip(want, got):
            w.grad = torch.randn(w.shape, generator=gen)
            g.grad = w.grad.clone()
        norm = torch.nn.utils.clip_grad_norm_(want, 1.0)
        assert reference.clip_grad_norm(got, 1.0) == pytest.approx(float(norm), rel=1e-6)
        opt.step()
        reference.adamw_step(got, state, lr=3e-3, weight_decay=0.1)
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-9)
