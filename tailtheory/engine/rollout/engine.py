"""Rollout engine: batched KV-cache sampling with a real training-inference mismatch.

Source: TIM (Zhong et al., arXiv 2605.14220; claims V1, V2) for the rollout paths; DVP (Li et
al., arXiv 2512.23087; P1, P3) for sampler-side vocabulary pruning.

The trainer computes log-probs with
:func:`~tailtheory.engine.policy_forward.response_logprobs` (one float32 full forward over
prompt + response). The rollout engine samples one token at a time with the model's KV cache
(left-padded prompts, attention mask, position ids) and reports the log-probs of the
distribution it actually sampled from (after temperature and pruning). Paths:

- ``exact``: sample with float32 KV decoding, then compute the rollout log-probs with
  :func:`response_logprobs` itself, so they are bitwise equal to the trainer's (V1). The sampler's
  distribution differs from them only by the ``kv`` mismatch below.
- ``bf16`` / ``fp16``: an inference copy of the weights in that dtype, refreshed by
  :meth:`RolloutEngine.sync` every step (V2: rounding in every matmul).
- ``fp8``: the FP8 rollouts of large RL runs, emulated on CPU: the Linear weights of the
  transformer blocks quantised to float8 e4m3 with per-channel (or per-tensor) scales and
  dequantised to bfloat16, embeddings, norms and lm_head in bfloat16, the forward in bfloat16;
  re-quantised at every sync. Its weight rounding is ~10x bf16's (e4m3 keeps 3 mantissa bits);
  the log-ratio shows it where the weights dominate the error (4-5x bf16's mismatch on M7's
  model), hardly where bf16 activation rounding does (the warm-started K&K policy).
- ``kv``: the float32 trainer weights, incremental decoding (V2: another reduction order).
- ``logit_noise`` / ``weight_noise`` (V6): ``kv`` plus Gaussian noise of size ``sigma = noise`` on
  every logit (DVP's model) or, relative, on every block Linear weight (redrawn at each sync),
  seeded by run seed and step; log-probs of the noisy distribution (``engine/rollout/noise.py``).

Backends: ``hf`` decodes with the Hugging Face model's own KV-cache ``forward`` (the copies
above; ``tailtheory.engine.rollout.hf``); ``fast`` with the separate engine of
``tailtheory.engine.rollout.fast`` (float32 on ``exact`` / ``kv``, that dtype on ``bf16`` / ``fp16``
/ ``fp8``, the copies' weight values), which prefills each distinct prompt once and drops
finished rows; same ``_step``, same ``RolloutBatch``. A model it cannot run is a ``ValueError``
naming ``hf`` (:func:`check_backend`), never a silent fallback.

The copies are made by ``tailtheory.engine.rollout.copies`` (the same copies as M7's paired logits);
the trainer's forward is ``tailtheory.engine.policy_forward`` (``tailtheory.core.forward``'s).

Sign convention as in ``tailtheory.mismatch.logprob``: ``Delta = logp_rollout - logp_trainer``.

Claims: V1, V2 (infrastructure; the verdicts come from the training checks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.forward import left_pad
from tailtheory.core.safeset import safe_vocab_mask
from tailtheory.core.stats import token_stats
from tailtheory.engine.policy_forward import response_logits, response_logprobs
from tailtheory.engine.rollout.copies import (COPY_DTYPES, FP8_SCALING, FP8_SCALINGS, check_trainer,
                                        fp8_dtype, inference_copy, sync_copy)
from tailtheory.engine.rollout.fast import unsupported
from tailtheory.engine.rollout.hf import HFDecode
from tailtheory.engine.rollout.noise import (NOISE_PATHS, RolloutNoise, check_noise, load_noisy,
                                     noisy_copy, noisy_weights_of, stack_noise)

PATHS = ("exact", "bf16", "fp16", "kv", "fp8", *NOISE_PATHS)
"""Rollout paths :class:`RolloutEngine` knows."""

HF = "hf"
"""The decoder that runs the Hugging Face model's own forward with its KV cache
(:mod:`tailtheory.engine.rollout.hf`)."""

FAST = "fast"
"""The engine's own KV-cache decoder over the model's weights (:mod:`tailtheory.engine.rollout.fast`)."""

BACKENDS = (HF, FAST)
"""Decoders: the Hugging Face model's forward, or ``tailtheory.engine.rollout.fast``."""

DEFAULT_BACKEND = FAST
"""The decoder of a run (``TrainConfig.rollout_backend``) unless it names another; a bare
:class:`RolloutConfig` decodes with ``hf``, the decoder the stored measurements (V1, V2, the warm
starts' evaluations) were sampled with."""

SAMPLERS = ("multinomial", "inverse-cdf")
"""How a token is drawn from the step's probabilities ``p (B, V)``: ``multinomial``
(``torch.multinomial``: it draws ``B x V`` exponentials, 40% of a rollout at V = 8,192 on this CPU,
``benchmarks/bench_step.py --workload text --profile``) or ``inverse-cdf``
(:func:`sample_inverse_cdf`: one uniform a row). Both sample ``p`` exactly; from the same
generator they draw different tokens."""

FAST_DTYPES = {"exact": "float32", "kv": "float32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8",
               "logit_noise": "float32", "weight_noise": "float32"}
"""The ``fast`` backend's engine dtype on each path."""


def sample_inverse_cdf(p: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token a row of ``p (B, V)``: :func:`inverse_cdf` at ``u ~ U[0, 1)``, one a row."""
    u = torch.rand(p.shape[0], 1, generator=generator, dtype=torch.float64, device=p.device)
    return inverse_cdf(p, u)


def inverse_cdf(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token of each row of ``p (B, V)`` (rows need not sum to 1) at its uniform ``u (B, 1)``
    float64: the first index whose cumulative sum (float64) exceeds ``u`` times the row's total;
    a token of probability 0 is never drawn. Returns ``(B, 1)`` int64. The draw of
    :func:`sample_inverse_cdf`, and of given uniforms (the decisiveness probe's common random
    numbers, ``tailtheory.lopti.decisive.branches``)."""
    c = p.double().cumsum(-1)                                                 # (B, V)
    tok = torch.searchsorted(c, u * c[:, -1:], right=True)                   # first c > u total
    over = tok[:, 0] >= p.shape[-1]          # u * total rounded up to the total: the last
    if over.any():                           # token of non-zero probability
        last = (p[over] > 0).cumsum(-1).argmax(-1, keepdim=True)
        tok[over] = last
    return tok


@dataclass(frozen=True)
class RolloutConfig:
    """How the rollout engine samples."""

    path: str = "bf16"
    """One of ``PATHS``: ``exact`` (V1, zero mismatch), ``bf16`` / ``fp16`` (low-precision copy of
    the weights, V2), ``fp8`` (e4m3 Linear weights, bf16 compute), ``kv`` (float32 incremental
    decoding, V2), ``logit_noise`` / ``weight_noise`` (``kv`` plus Gaussian noise, V6)."""
    noise: float = 0.0
    """``sigma`` of the noise paths (``tailtheory.engine.rollout.noise``); 0 on every other path."""
    noise_seed: int = 0
    """Seed of the noise paths' generators (the run's seed; the step comes with ``sync``)."""
    fp8_scaling: str = FP8_SCALING
    """Scales of the ``fp8`` path: ``channel`` (one per output row, the default) or ``tensor``;
    see ``tailtheory.engine.rollout.copies.FP8_SCALING``."""
    temperature: float = 1.0
    """Sampling temperature ``tau``: the sampled distribution is ``softmax(z / tau)``."""
    max_new_tokens: int = 16
    """Response length cap ``T``."""
    prune_rule: str | None = None
    """``None`` (full vocabulary) or a rule of ``tailtheory.core.safeset.RULES`` (DVP: ``min_p``)."""
    rho: float = 1e-6
    """Threshold of ``prune_rule`` (DVP's ``rho`` for min-p: keep ``pi >= rho max pi``; DVP,
    arXiv 2512.23087, uses 1e-4 ... 1e-8)."""
    return_logits: bool = False
    """Also return the raw rollout logits ``(B, T, V)`` (before temperature and pruning) for the
    exact token KL of :func:`tailtheory.core.stats.token_stats`."""
    backend: str = DEFAULT_BACKEND
    """The decoder, one of ``BACKENDS``: ``fast`` (``tailtheory.engine.rollout.fast``; a model it
    cannot run is an error, :func:`check_backend`) or ``hf`` (the model's own KV-cache forward,
    which the measurements of V1, V2, P4 and the warm start's evaluation name)."""
    sampler: str = "multinomial"
    """One of :data:`SAMPLERS`."""

    def __post_init__(self):
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {self.sampler!r}")
        if self.path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {self.path!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.fp8_scaling not in FP8_SCALINGS:
            raise ValueError(f"fp8_scaling must be one of {FP8_SCALINGS}, "
                             f"got {self.fp8_scaling!r}")
        check_noise(self.path, self.noise)
        if self.path == "fp8":
            fp8_dtype()  # a clear error on a torch build without float8 dtypes
        if not (isinstance(self.temperature, (int, float)) and 0 < self.temperature < float("inf")):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        check_positive_int(self.max_new_tokens, "max_new_tokens")
        if self.prune_rule is not None:
            from tailtheory.core.safeset import RULES
            if self.prune_rule not in RULES:
                raise ValueError(f"prune_rule must be None or one of {RULES}, "
                                 f"got {self.prune_rule!r}")


@dataclass(frozen=True)
class RolloutBatch:
    """Sampled responses with their rollout log-probs; frozen: built complete where it is made
    (a changed copy is ``dataclasses.replace``).

    Shapes: input_ids (B, P+T) left-padded prompt then response; attention_mask (B, P+T) bool
    (False on prompt padding only); response, mask, logp (B, T); logits, keep (B, T, V) or None.
    """

    input_ids: torch.Tensor
    prompt_len: int
    """``P``: width of the left-padded prompt block; response token t sits at ``P + t``."""
    response: torch.Tensor
    mask: torch.Tensor
    """True up to and including EOS; False after it (those tokens are ``pad_id``)."""
    logp: torch.Tensor
    """Rollout log-probs of the sampled distribution (after temperature and pruning); 0 where
    ``mask`` is False."""
    logits: torch.Tensor | None
    """(B, T, V) float32 raw rollout logits (``return_logits``); after EOS the ``hf`` backend's
    logits of the pad token, the ``fast`` backend's zeros (finished rows are not computed)."""
    attention_mask: torch.Tensor
    prompt_lens: torch.Tensor
    """(B,) true (unpadded) prompt lengths."""
    keep: torch.Tensor | None = None
    """(B, T, V) bool kept vocabulary the sampler used (only with pruning): pass it as ``keep``
    to :func:`response_logprobs` so the trainer prunes with the same ``S`` (P3)."""
    noise: torch.Tensor | None = None
    """(B, T, V) the Gaussian ``delta`` the ``logit_noise`` path added (``return_logits`` only;
    ``logits`` are then ``z + delta``, the sampler's); 0 after EOS."""


def check_backend(model, backend: str, what: str = "this model") -> None:
    """A ``ValueError`` naming the ``hf`` backend when ``backend`` is ``fast`` and the inference
    engine cannot run ``model`` (:func:`tailtheory.engine.rollout.fast.unsupported`): no silent
    fallback. ``what`` names the model in the message."""
    if backend != FAST:
        return

    if reason := unsupported(model):
        kind = getattr(getattr(model, "config", None), "model_type", None)
        raise ValueError(f"rollout backend 'fast' cannot run {what}, a {kind!r} model ({reason}); "
                         f"pass --rollout-backend hf (rollout_backend='hf' in a TrainConfig, "
                         f"backend='hf' in a RolloutConfig) to sample with the model's own "
                         f"forward")


def _check_token_id(v: Any, name: str, V: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < V:
        raise ValueError(f"{name} must be a token id in [0, {V}), got {v!r}")


class RolloutEngine:
    """Samples responses on one of the :data:`PATHS` from a trainer ``model`` (float32 LM)."""

    def __init__(self, model, config: RolloutConfig | None = None):
        self.config = config or RolloutConfig()
        check_trainer(model)
        self.model = model
        path, scaling = self.config.path, self.config.fp8_scaling
        self.fast, self.noise = None, RolloutNoise.of(self.config)  # noise: step 0 till a sync
        if self.config.backend == FAST:
            from tailtheory.engine.rollout.fast import InferenceEngine
            check_backend(model, FAST)
            weights = noisy_weights_of(self.noise, model)
            self.fast = InferenceEngine(model, FAST_DTYPES[path], scaling, weights)
        copy = path in COPY_DTYPES and self.fast is None
        self.infer = inference_copy(model, path, scaling) if copy else model
        if path == "weight_noise" and self.fast is None:  # hf: a float32 copy, noisy weights
            self.infer = noisy_copy(model, noisy_weights_of(self.noise, model))

    @torch.no_grad()
    def sync(self, model, step: int | None = None) -> None:
        """Refresh the inference weights from the trainer ``model`` (call after every step);
        ``step`` (the next rollouts') seeds the noise paths (default: the last sync's + 1)."""
        self.model = model
        if self.noise is not None:
            self.noise.at(self.noise.step + 1 if step is None else step)
        if self.fast is not None:
            self.infer = model
            self.fast.sync(model, noisy_weights_of(self.noise, model))
            return
        if self.config.path == "weight_noise":
            load_noisy(self.infer, model, noisy_weights_of(self.noise, model))
            return
        if self.config.path not in COPY_DTYPES:
            self.infer = model
            return
        sync_copy(self.infer, model, self.config.path, self.config.fp8_scaling)

    def _keep(self, zt: torch.Tensor) -> torch.Tensor | None:
        if self.config.prune_rule is None:
            return None
        return safe_vocab_mask(zt, rule=self.config.prune_rule, threshold=self.config.rho)

    def _step(self, z: torch.Tensor, generator) -> tuple[torch.Tensor, ...]:
        """Sample from raw next-token logits ``z (B, V)``: tokens, logp, keep.

        ``logp = log_softmax(z / tau)`` on the kept set at the sampled token: the formula of
        :func:`token_stats` (bitwise: same ops on the same rows), without its other statistics.
        """
        tau = float(self.config.temperature)
        zt = z.float() if tau == 1.0 else z.float() / tau     # x / 1.0 is x: one division less
        keep = self._keep(zt)                                              # (B, V) or None
        zs = zt if keep is None else zt.masked_fill(~keep, float("-inf"))
        p = torch.softmax(zs, -1)
        tok = (torch.multinomial(p, 1, generator=generator) if self.config.sampler == "multinomial"
               else sample_inverse_cdf(p, generator))                          # (B, 1)
        lp = torch.log_softmax(zs, -1).gather(-1, tok)[:, 0]
        return tok[:, 0], lp, keep

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], eos_id, pad_id: int,
                 generator: torch.Generator | None = None) -> RolloutBatch:
        """Sample up to ``max_new_tokens`` per prompt; a row ends at the first of the stop ids
        ``eos_id`` (one id, or several: ``Task.stop_ids``), and sampling stops once every row
        has ended. ``pad_id`` fills a row after its end (it may be a stop id: the batch's
        ``mask`` says where a row ends).

        Shapes: prompts B lists -> RolloutBatch with response (B, T), T <= max_new_tokens.
        """
        V = self.model.config.vocab_size
        stops = [eos_id] if isinstance(eos_id, int) else list(eos_id)
        for i in stops or [None]:
            _check_token_id(i, "eos_id", V)
        _check_token_id(pad_id, "pad_id", V)
        dev = next(self.infer.parameters()).device
        ids, attn, lens = (t.to(dev) for t in left_pad(prompts, pad_id, V))
        was_training = self.infer.training
        self.infer.eval()
        try:  # inference mode: no autograd bookkeeping; _batch's stacks are plain tensors again
            with torch.inference_mode():
                steps = self._decode(ids, attn, lens, torch.tensor(stops, device=dev), pad_id,
                                     generator)
        finally:
            self.infer.train(was_training)
        return self._batch(ids, attn, lens, *steps)

    def _decode(self, ids, attn, lens, stops: torch.Tensor, pad_id: int, generator):
        """The KV-cache loop: per-step lists of tokens, masks, logp, keep and raw logits.

        ``hf`` samples every row at every step (finished rows too, then replaced by ``pad_id``),
        ``fast`` only the live rows: the same distributions, another use of the generator."""
        B, T = ids.shape[0], self.config.max_new_tokens
        toks, masks, lps, keeps, logits, deltas = [], [], [], [], [], []
        on_logits = self.noise is not None and self.noise.on_logits
        alive = torch.ones(B, dtype=torch.bool, device=ids.device)
        src = self.fast.start(ids, attn, T) if self.fast is not None else \
            HFDecode(self.infer, ids, attn, lens, T)
        for t in range(T):
            z, rows = src.logits.float(), src.rows                       # (A, V), (A,)
            if rows is not None and not bool(alive[rows].all()):
                rows, z = rows[alive[rows]], z[alive[rows]]
            dz = self.noise.delta(z) if on_logits else None   # logit_noise: sample from z + dz
            z = z if dz is None else z + dz
            tok, lp, keep = self._step(z, generator)
            if len(z) < B:  # back to (B, ...): finished rows hold pad, logp 0, all kept, z 0
                tok, lp, keep, z, dz = _scatter(B, rows, (tok, pad_id), (lp, 0), (keep, True),
                                                (z, 0), (dz, 0))
            tok = torch.where(alive, tok, pad_id)
            if keep is not None:  # after EOS the pad token is scored: keep everything there
                keep = keep | ~alive[:, None]
            masks.append(alive.clone())
            toks.append(tok)
            lps.append(torch.where(alive, lp, 0.0))
            keeps.append(keep)
            if self.config.return_logits:  # (B, V) per step: keep only when asked for
                logits.append(z)
                deltas.append(dz)
            alive &= ~torch.isin(tok, stops)
            if t + 1 == T or not alive.any():
                break
            src.advance(tok, alive)
        return toks, masks, lps, keeps, logits, deltas

    def _batch(self, ids, attn, lens, toks, masks, lps, keeps, logits, deltas) -> RolloutBatch:
        response = torch.stack(toks, 1)                                    # (B, T)
        attn = torch.cat([attn[:, :ids.shape[1]], torch.ones_like(response, dtype=torch.bool)], 1)
        keep = torch.stack(keeps, 1) if keeps[0] is not None else None     # (B, T, V)
        mask = torch.stack(masks, 1)
        noise = stack_noise(deltas, mask)                                  # (B, T, V) or None
        rb = RolloutBatch(input_ids=torch.cat([ids, response], 1), prompt_len=ids.shape[1],
                          response=response, mask=mask, logp=torch.stack(lps, 1),
                          logits=torch.stack(logits, 1) if logits else None,
                          attention_mask=attn, prompt_lens=lens, keep=keep, noise=noise)
        return replace(rb, **self._exact(rb)) if self.config.path == "exact" else rb

    def _exact(self, rb: RolloutBatch) -> dict:
        """V1: the trainer's own function, same weights, same dtype: bitwise the trainer's.
        Returns the batch's new ``logp`` (and ``logits`` when it holds them)."""
        tau = float(self.config.temperature)
        if rb.logits is None:
            lp = response_logprobs(self.model, rb, temperature=tau, keep=rb.keep)
            return {"logp": lp.masked_fill(~rb.mask, 0.0)}
        # TRM's exact KL wants the logits whole: the trainer's full-logits path too
        z = response_logits(self.model, rb)                              # (B, T, V)
        lp = token_stats(z, rb.response, keep=rb.keep, temperature=tau)["logp"]
        return {"logp": lp.masked_fill(~rb.mask, 0.0), "logits": z.float()}


def _scatter(B: int, rows, *outs):
    """Sampler outputs ``(A, ...)`` of the live ``rows`` spread to ``B`` rows, ``(x, fill)``."""
    def spread(x, fill):
        full = x.new_full((B, *x.shape[1:]), fill)
        full[rows] = x
        return full
    return tuple(None if x is None else spread(x, fill) for x, fill in outs)


def sampled_logprobs(model, config: RolloutConfig, seeds=(0, 1), n_prompts: int = 16,
                     prompt_len: int = 6, eos_id: int = 1, pad_id: int = 0) -> list[tuple]:
    """Rollout and trainer log-probs of the tokens the engine samples on ``config.path`` (V1, V2).

    Source: TIM (V1, V2). Per seed: ``n_prompts`` random prompts of ``prompt_len`` tokens in
    ``[2, V)`` (0 and 1 are ``pad_id`` / ``eos_id``), sampled with a generator seeded by ``seed``;
    the trainer's side is :func:`response_logprobs` with the sampler's ``keep``. The mismatch of
    V2 is ``roll - train`` on ``mask``.

    Shapes: -> one ``(roll (B, T), train (B, T), mask (B, T))`` per seed, B = n_prompts.
    """
    V = model.config.vocab_size
    engine = RolloutEngine(model, config)
    out = []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        prompts = torch.randint(2, V, (n_prompts, prompt_len), generator=g).tolist()
        rb = engine.generate(prompts, eos_id=eos_id, pad_id=pad_id, generator=g)
        with torch.no_grad():
            train = response_logprobs(model, rb, temperature=config.temperature, keep=rb.keep)
        out.append((rb.logp, train, rb.mask))
    return out
