"""Rollout mismatch of a chosen size: Gaussian noise on the rollout's logits or weights.

Source: DVP (Li et al., arXiv 2512.23087) models the training-inference mismatch as i.i.d.
Gaussian noise on the logits, ``z_roll = z + delta``, ``delta_j ~ N(0, sigma^2)`` (the model of
the ``mismatch`` section's M5); TIM (Zhong et al., arXiv 2605.14220) for the mismatch of
low-precision inference weights. Claim V6 sweeps ``sigma`` against training outcome. Two rollout
paths of :class:`tailtheory.engine.rollout.engine.RolloutEngine` put a mismatch of size ``sigma`` (the
config's ``rollout_noise``) on top of the float32 ``kv`` path:

- ``logit_noise``: at every decoded position the sampler's logits are ``z + delta``, ``z`` the
  float32 KV-cache logits of the trainer's weights, ``delta`` i.i.d. Gaussian with standard
  deviation ``sigma`` per vocabulary entry, drawn fresh for each row and position. Temperature
  and pruning then act on ``z + delta`` as on any path's logits: the token is drawn from
  ``softmax_S((z + delta) / tau)``, whose log-prob is the one reported.
- ``weight_noise``: the inference weights are the trainer's times ``(1 + sigma * eps)``,
  ``eps`` i.i.d. standard normal per entry, for the Linear weights of the transformer blocks
  (those the ``fp8`` path quantises: ``copies.fp8_weight_names``); embeddings, norms and the
  output layer are the trainer's. A relative error per weight, as quantisation makes, drawn
  anew at every sync; the forward is float32.

Seeding: the noise of step ``s`` of a run with seed ``r`` comes from its own generators, seeded
by :func:`noise_seed` of ``(r, s)`` (one stream for the logits, one for the weights), never from
the sampler's generator: the same run gives bitwise the same noise, a resumed run too (the
trainer passes the step to ``sync``), and the token draws use the sampler's stream as on ``kv``.
Within a step the logit noise stream goes on from position to position (and from one
``generate`` to the next until the next sync).

At ``sigma = 0`` both paths compute exactly the ``kv`` path (``z + 0`` and ``w * 1`` are
bitwise ``z`` and ``w``): log-probs equal to the trainer's up to float32 rounding of the
incremental decode.
"""

from __future__ import annotations

import hashlib
import math

import torch

from tailtheory.engine.rollout.copies import fp8_weight_names

NOISE_PATHS = ("logit_noise", "weight_noise")
"""Rollout paths whose mismatch is a Gaussian noise of standard deviation ``sigma``."""


def check_noise(path: str, sigma, name: str = "noise", allow_zero: bool = True) -> None:
    """``sigma`` must be a finite number ``>= 0``, non-zero only on :data:`NOISE_PATHS` (and
    ``> 0`` there unless ``allow_zero``); a ``ValueError`` naming ``name`` otherwise."""
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not (
            sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"{name} must be a finite number >= 0, got {sigma!r}")
    if path in NOISE_PATHS and not allow_zero and sigma == 0:
        raise ValueError(f"the {path} rollout path needs {name} > 0 (the noise's standard "
                         f"deviation sigma); at 0 it is the kv path")
    if path not in NOISE_PATHS and sigma != 0:
        raise ValueError(f"{name} {sigma} is set but rollout path {path!r} adds no noise; "
                         f"{name} is for the paths {', '.join(NOISE_PATHS)}")


def noise_seed(seed: int, step: int, kind: str) -> int:
    """The generator seed of the ``kind`` noise (``logit`` or ``weight``) of step ``step`` of a
    run seeded ``seed``: 60 bits of SHA-256, so no two (seed, step, kind) share a stream."""
    text = f"tailtheory.engine.rollout.noise/{kind}/{int(seed)}/{int(step)}"
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def _generator(seed: int, device) -> torch.Generator:
    return torch.Generator(torch.device(device)).manual_seed(seed)


@torch.no_grad()
def noisy_weights(model, sigma: float, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``{name: w * (1 + sigma * eps)}`` for the Linear weights of the blocks of ``model``
    (``fp8_weight_names``), ``eps`` standard normal from ``generator``, drawn in name order."""
    named = dict(model.named_parameters())
    out = {}
    for name in sorted(n for n in fp8_weight_names(model) if n in named):
        w = named[name].detach()
        eps = torch.randn(w.shape, generator=generator, device=w.device, dtype=w.dtype)
        out[name] = w * (1 + sigma * eps)
    return out


class RolloutNoise:
    """The noise of one rollout engine on ``path`` (one of :data:`NOISE_PATHS`).

    ``sigma``: the standard deviation; ``seed``: the run's seed. :meth:`at` moves it to a step
    (the engine's ``sync``); :meth:`delta` draws logit noise, :meth:`weights` the step's weights.
    """

    def __init__(self, path: str, sigma: float, seed: int = 0):
        if path not in NOISE_PATHS:
            raise ValueError(f"path must be one of {NOISE_PATHS}, got {path!r}")
        check_noise(path, sigma)
        self.path, self.sigma, self.seed = path, float(sigma), int(seed)
        self.step = 0
        self._logit: dict[torch.device, torch.Generator] = {}

    @classmethod
    def of(cls, config) -> "RolloutNoise | None":
        """The noise of a ``RolloutConfig`` (``path``, ``noise``, ``noise_seed``): ``None`` off
        :data:`NOISE_PATHS`."""
        if config.path not in NOISE_PATHS:
            return None
        return cls(config.path, config.noise, config.noise_seed)

    @property
    def on_logits(self) -> bool:
        return self.path == "logit_noise"

    def at(self, step: int) -> None:
        """Start step ``step``: the logit noise restarts from that step's seed."""
        self.step, self._logit = int(step), {}

    def delta(self, z: torch.Tensor) -> torch.Tensor:
        """Gaussian noise ``(A, V)`` of standard deviation ``sigma`` for the logits ``z`` (float32,
        on ``z``'s device), the next draws of this step's stream."""
        g = self._logit.get(z.device)
        if g is None:
            g = self._logit[z.device] = _generator(noise_seed(self.seed, self.step, "logit"),
                                                   z.device)
        return self.sigma * torch.randn(z.shape, generator=g, device=z.device, dtype=z.dtype)

    def weights(self, model) -> dict[str, torch.Tensor]:
        """The step's noisy block Linear weights of the trainer ``model`` (:func:`noisy_weights`):
        the same for the same (seed, step)."""
        dev = next(model.parameters()).device
        g = _generator(noise_seed(self.seed, self.step, "weight"), dev)
        return noisy_weights(model, self.sigma, g)


def noisy_weights_of(noise: RolloutNoise | None, model) -> dict[str, torch.Tensor] | None:
    """The current step's noisy weights of ``model`` on ``weight_noise``; ``None`` otherwise."""
    if noise is None or noise.on_logits:
        return None
    return noise.weights(model)


def stack_noise(deltas: list, mask: torch.Tensor) -> torch.Tensor | None:
    """The per-step logit noise ``(B, V)`` of a rollout as ``(B, T, V)``, 0 where ``mask (B, T)``
    is False; ``None`` when none was recorded."""
    if not deltas or deltas[0] is None:
        return None
    return torch.stack(deltas, 1).masked_fill(~mask[..., None], 0.0)


def noisy_copy(model, weights: dict[str, torch.Tensor]):
    """The ``hf`` backend's inference model on ``weight_noise``: a float32 copy of the trainer
    ``model`` (eval mode) loaded by :func:`load_noisy`."""
    import copy

    infer = copy.deepcopy(model).eval()
    load_noisy(infer, model, weights)
    return infer


@torch.no_grad()
def load_noisy(infer, model, weights: dict[str, torch.Tensor]) -> None:
    """Set the float32 copy ``infer`` (the ``hf`` backend's) to the trainer ``model``'s
    parameters, with ``weights`` in place of those it names."""
    src = dict(model.named_parameters())
    for name, p in infer.named_parameters():
        if name not in src or src[name].shape != p.shape:
            raise ValueError(f"model does not match the inference copy at parameter {name!r}")
        p.copy_(weights.get(name, src[name]))
