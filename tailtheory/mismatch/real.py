"""Real training-inference mismatch on a small transformer (TIM; DVP's (1-p) law, claim M7).

Source: TIM (Zhong et al., arXiv 2605.14220) for the sources of mismatch; DVP (Li et al.,
arXiv 2512.23087) for the (1-p) envelope they should follow (M2, M3 of ``tailtheory.mismatch.logprob``).

The trainer is the float32 full forward of a causal LM (``tailtheory.core.forward``); the
inference engine is one of:

- ``bf16`` / ``fp16``: a copy of the model in bfloat16 / float16 (rounding in every matmul);
- ``fp8``: the Linear weights of the transformer blocks quantised to float8 e4m3 with a scale
  and dequantised to bfloat16, the rest in bfloat16 (``tailtheory.engine.rollout.copies``);
- ``kv``: float32 incremental decoding, one token at a time with the KV cache, against the
  full forward (a different reduction order, as in a serving engine).

No noise is injected: every ``delta`` measured here comes from real arithmetic. Sign convention
as in ``tailtheory.mismatch.logprob``: ``Delta = log p_infer - log p_train`` (TIM's ``delta_t = -Delta``).

Claims: M7 (and the shared model and pairs of P4, V1, V2).
"""

from __future__ import annotations

import copy

import torch

from tailtheory.core.checks import check_finite, check_positive_int
from tailtheory.core.forward import full_forward
from tailtheory.core.models import cache_keyword, output_cache, tiny_lm
from tailtheory.engine.devices import model_generator
from tailtheory.engine.rollout.copies import FP8_SCALING, check_trainer, inference_copy
from tailtheory.engine.rollout.engine import HF
from tailtheory.engine.rollout.engine import RolloutConfig, RolloutEngine
from tailtheory.mismatch import logprob as mm

PATHS = ("bf16", "fp16", "kv", "fp8")
"""The inference paths :func:`paired_logits` knows."""

M7_PATHS = ("bf16", "fp16", "kv")
"""The paths M7's check and notebook 01's figure measure (fp8 came later; M7's ledger row is
about these three)."""

SHARPEN_SCALE = 40.0
"""lm_head scale of M7's model: some positions reach p > 0.9, ~99% of tokens fall below 1e-3
(random init, V = 512, hidden 128)."""

M7_VOCAB = 512
"""Vocabulary of M7's model (shared by P4, V1 and V2)."""


def _check_input_ids(input_ids, vocab_size: int) -> torch.Tensor:
    t = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(input_ids)
    if t.is_floating_point() or t.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {t.dtype}")
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise ValueError(f"input_ids must have shape (B, T) with B, T >= 1; got {tuple(t.shape)}")
    if t.min() < 0 or t.max() >= vocab_size:
        raise ValueError(f"input_ids must lie in [0, {vocab_size}) (the model's vocabulary); "
                         f"got range [{int(t.min())}, {int(t.max())}]")
    return t.long()


def kv_decode(module, input_ids: torch.Tensor, field: str = "logits") -> torch.Tensor:
    """Decode one token at a time, reusing the KV cache: position t sees keys 0..t. ``module`` is
    a causal LM (``field="logits"``: (B, T, V)) or its backbone (``"last_hidden_state"``:
    (B, T, H))."""
    kw = cache_keyword(module)
    out = module(input_ids=input_ids[:, :1], use_cache=True)
    cache, steps = output_cache(out), [getattr(out, field)]
    for t in range(1, input_ids.shape[1]):
        out = module(input_ids=input_ids[:, t:t + 1], use_cache=True, **{kw: cache})
        cache = output_cache(out)
        steps.append(getattr(out, field))
    return torch.cat(steps, dim=1)


@torch.no_grad()
def paired_logits(model, input_ids, path: str = "bf16",
                  scaling: str = FP8_SCALING) -> tuple[torch.Tensor, torch.Tensor]:
    """Trainer and inference logits of the same tokens: the real mismatch source of M7.

    Source: TIM (M7). ``delta = inference_logits - trainer_logits`` is the logit perturbation of
    M1-M3, produced by arithmetic, not injected.

    The trainer is ``model``'s float32 full forward. ``path``: ``"bf16"`` / ``"fp16"`` / ``"fp8"``
    run an inference copy of ``model`` (:func:`tailtheory.engine.rollout.copies.inference_copy`;
    ``scaling`` is the fp8 scaling, ``"channel"`` or ``"tensor"``); ``"kv"`` runs float32
    incremental decoding with the KV cache. ``model`` is left unchanged (eval mode, float32).

    Shapes: input_ids (B, T) -> (trainer_logits, inference_logits), both float64 (B, T, V).
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    check_trainer(model)
    ids = _check_input_ids(input_ids, model.config.vocab_size)
    ids = ids.to(next(model.parameters()).device)
    model.eval()
    z_train = full_forward(model, ids).double()
    if path == "kv":
        z_infer = kv_decode(model, ids).double()
    else:
        z_infer = full_forward(inference_copy(model, path, scaling), ids).float().double()
    check_finite(z_infer, f"inference_logits ({path})")  # fp16 can overflow on sharp models
    return z_train, z_infer


def sharpen(model, scale: float):
    """A copy of ``model`` whose lm_head weights are multiplied by ``scale``.

    A random-init LM is nearly uniform (logit std ~0.2); scaling the output layer spreads the
    logits so that some tokens reach p > 0.9 while most of the vocabulary falls below 1e-3:
    a real low-probability tail, as a trained LLM has. This is a deviation from training a
    model, recorded in ``paper_repro.md`` (M7).
    """
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    sharp = copy.deepcopy(model)
    with torch.no_grad():
        sharp.get_output_embeddings().weight.mul_(float(scale))
    return sharp.eval()


def m7_model(vocab_size: int = M7_VOCAB, seed: int = 0, **overrides):
    """M7's model: a random-init tiny LM (:func:`tailtheory.core.models.tiny_lm`) sharpened by
    :data:`SHARPEN_SCALE`, float32, eval mode. The trainer of M7, P4, V1 and V2.

    ``overrides`` replace fields of ``TinyLMConfig`` (``hidden=64`` for a faster test model).
    """
    return sharpen(tiny_lm(vocab_size=vocab_size, seed=seed, **overrides), SHARPEN_SCALE)


def random_input_ids(vocab_size: int, B: int, T: int, seed: int = 0) -> torch.Tensor:
    """Uniform random token ids ``(B, T)``, reproducible from ``seed``."""
    V = check_positive_int(vocab_size, "vocab_size", 2)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (check_positive_int(B, "B"), check_positive_int(T, "T")),
                         generator=g)


def policy_windows(model, task, B: int, T: int, seed: int = 202, sample_seed: int = 0,
                   max_prompts: int | None = None) -> torch.Tensor:
    """``(B, T)`` ids a task policy writes: the first ``T`` tokens of prompt + its own sampled
    response (float32 ``kv`` sampling at temperature 1, EOS included), for the first ``B``
    held-out problems (``task.problems(..., seed=seed)``) whose text reaches ``T`` tokens; up to
    ``max_prompts`` (default ``4 B``) problems are drawn, and fewer long enough is an error.
    M7's input on a trained policy: teacher-forced text from the policy's own distribution."""
    B, T = check_positive_int(B, "B"), check_positive_int(T, "T")
    n = max_prompts or 4 * B
    problems = task.problems(n, seed=seed)
    rc = RolloutConfig(path="kv", max_new_tokens=task.max_response_len, backend=HF)
    g = model_generator(model, sample_seed)
    rb = RolloutEngine(model, rc).generate([p.prompt_ids for p in problems], eos_id=task.stop_ids,
                                           pad_id=task.pad_id, generator=g)
    rows = []
    for p, resp, m in zip(problems, rb.response, rb.mask):
        ids = list(p.prompt_ids) + resp[m].tolist()
        if len(ids) >= T:
            rows.append(ids[:T])
        if len(rows) == B:
            return torch.tensor(rows, device=next(model.parameters()).device)
    raise ValueError(f"only {len(rows)} of {n} sampled texts reach {T} tokens; {B} are needed "
                     f"(lower T or raise max_prompts)")


HEAD_P, TAIL_P = 0.9, 1e-3
"""Probability cut-offs of the head / tail summaries of :func:`mismatch_envelope`."""

BOUND_RTOL, BOUND_ATOL = 1e-9, 1e-15
"""Slack allowed when counting tokens under M3's bound: float64 rounding only."""


def mismatch_tokens(trainer_logits, inference_logits,
                    per: str = "position") -> dict[str, torch.Tensor]:
    """Every token's ``p``, ``|Delta|``, ``eps`` and M3's bounds at that ``eps``: the one table
    of ``|Delta|`` against ``p`` that the envelope, its slope and the figures read.

    Source: DVP (M1-M3), TIM (M7). ``Delta = log softmax(z_infer) - log softmax(z_train)``,
    ``p = softmax(z_train)``; ``eps`` per position is ``max_{j,k} |delta_j - delta_k| / 2`` with
    ``delta = z_infer - z_train`` (``per="token"``: the tighter per-token value).

    Shapes: trainer_logits, inference_logits (B, T, V) -> dict of float64 (B, T, V): ``p``,
    ``abs_Delta``, ``eps``, ``bound_exact``, ``bound_first``, ``bound_linear``.
    """
    Delta = mm.logprob_mismatch(trainer_logits, inference_logits).abs()  # (B, T, V)
    z = torch.as_tensor(trainer_logits, dtype=torch.float64)
    p = torch.softmax(z, -1)
    eps = mm.mismatch_eps(torch.as_tensor(inference_logits, dtype=torch.float64) - z, per)
    eps = eps if per == "token" else eps[..., None].expand_as(p)  # (B, T, V)
    return dict(p=p, abs_Delta=Delta, eps=eps, bound_exact=mm.mismatch_bound(p, eps, "exact"),
                bound_first=mm.mismatch_bound(p, eps, "first"),
                bound_linear=mm.mismatch_bound(p, eps, "linear"))


def mismatch_envelope(trainer_logits, inference_logits, n_bins: int = 24,
                      per: str = "position") -> tuple[dict[str, float], "pd.DataFrame"]:
    """``|Delta|`` of every token against ``p``, and M3's bounds at the measured ``eps`` (M7).

    Source: TIM (M7), DVP (M2, M3). The tokens of :func:`mismatch_tokens`; every token must lie
    under the exact bound (a theorem given ``eps``).

    Returns ``(summary, df)``: summary numbers (``mean_abs``, ``max_abs``, ``head_mean_abs``
    (p > 0.9), ``tail_mean_abs`` (p < 1e-3), ``frac_under_exact``, ``frac_under_first``,
    ``frac_under_linear`` (M2 without its O(eps^2)), ``max_ratio_exact``) and a DataFrame with
    one row per log10-p bin.

    Shapes: trainer_logits, inference_logits (B, T, V) -> (dict, DataFrame with <= n_bins
    rows; empty bins are left out).
    """
    tok = mismatch_tokens(trainer_logits, inference_logits, per)
    p, Delta, eps, exact = tok["p"], tok["abs_Delta"], tok["eps"], tok["bound_exact"]

    def under(bound):
        return float((Delta <= bound * (1 + BOUND_RTOL) + BOUND_ATOL).double().mean())

    ratio = torch.where(exact > 0, Delta / exact, torch.zeros_like(Delta))
    summary = dict(
        n_tokens=Delta.numel(), mean_abs=float(Delta.mean()), max_abs=float(Delta.max()),
        head_mean_abs=float(Delta[p > HEAD_P].mean()) if (p > HEAD_P).any() else float("nan"),
        tail_mean_abs=float(Delta[p < TAIL_P].mean()) if (p < TAIL_P).any() else float("nan"),
        frac_head=float((p > HEAD_P).double().mean()),
        frac_tail=float((p < TAIL_P).double().mean()),
        mean_eps=float(eps.mean()), frac_under_exact=under(exact),
        frac_under_first=under(tok["bound_first"]), frac_under_linear=under(tok["bound_linear"]),
        max_ratio_exact=float(ratio.max()))
    return summary, _binned(tok, n_bins)


def _binned(tok: dict[str, torch.Tensor], n_bins: int):
    """Per log10-p bin of :func:`mismatch_tokens`'s table: token count, mean and max
    ``|Delta|``, mean of both bounds."""
    import pandas as pd

    p = tok["p"]
    logp = torch.log10(p.clamp_min(1e-300)).flatten()
    edges = torch.linspace(float(logp.min()), 0.0, n_bins + 1, dtype=torch.float64)
    idx = torch.bucketize(logp, edges[1:-1])
    cols = {"abs_Delta": tok["abs_Delta"].flatten(), "bound_exact": tok["bound_exact"].flatten(),
            "bound_first": tok["bound_first"].flatten(), "p": p.flatten()}
    df = pd.DataFrame({k: v.numpy() for k, v in cols.items()}).assign(bin=idx.numpy())
    out = df.groupby("bin").agg(p_mid=("p", "median"), count=("p", "size"),
                                mean_abs_Delta=("abs_Delta", "mean"),
                                max_abs_Delta=("abs_Delta", "max"),
                                mean_bound_exact=("bound_exact", "mean"),
                                mean_bound_first=("bound_first", "mean"))
    return out.reset_index()
