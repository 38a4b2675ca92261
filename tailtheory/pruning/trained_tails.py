"""DVP's pruning trade (P4) measured on trained models, with the mismatch of sampled tokens.

Source: DVP, Li et al., arXiv 2512.23087 (P4); TIM, Zhong et al., arXiv 2605.14220 (the real
bf16 rollout copy as the mismatch source, M7 / V2).

P4's first measurement (:func:`tailtheory.pruning.sweep.p4_measurement`) rests on a random model
whose lm_head was multiplied by 40. Here the tail is made by training:

- ``corpus_text``: the corpus LM (:mod:`tailtheory.engine.start.corpus_lm`, byte-level BPE, V = 4096,
  pretrained on the Python stdlib) on held-out corpus windows (teacher-forced contexts);
- ``corpus_rollout``: the same model continuing held-out prefixes with its own samples;
- ``policy_rollout``: the warm-started Knights-and-Knaves policy (``warm_model("full")``, V = 512,
  473 ids never seen in training) on its own sampled responses to held-out task prompts.

The sampler is the rollout engine's ``bf16`` copy (KV-cache decoding in bfloat16), the trainer the
float32 full forward; ``S`` is the sampler's min-p set, applied to both sides (P3). Sign as in
``tailtheory.mismatch.logprob``: ``Delta = log pi_infer - log pi_train`` on the kept set.

Per setting: ``sweep`` is :func:`~tailtheory.pruning.sweep.pruning_sweep` on fixed contexts
(exact full-distribution KL, mean and max ``|Delta|``, pruned mass; P4's knee is read here);
``shares`` splits the sampler's mass, ``E|Delta|`` and the KL over bins of the trainer's ``p``
(:func:`mass_shares`); rollout settings add ``sampled``: one engine rollout per ``rho`` (same
seed), with the mismatch of the tokens actually sampled (:func:`sampled_mismatch`).

P4's check (``tailtheory.pruning.claims._p4``) reads the knee of every setting here
(:func:`trained_knees`, the criterion fixed in advance in ``claims.MASS_NEGLIGIBLE`` / ``MOST``)
next to the random model's; the claim is TOY-SCALE only when every trained setting shows it. The
measurement takes minutes, so it is stored (``results/p4_trained.json``, :func:`p4_trained_data`:
``quick`` reads it, ``thorough`` re-measures). Figures: ``plot_trained_sweep`` and
``plot_mass_shares`` of :mod:`tailtheory.pruning.figures`.

Shapes: logits (B, T, V), per-token (B, T), per-sequence (B,).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from tailtheory.core.checks import check_logits, check_positive_int, check_same_shape
from tailtheory.core.measurements import measured
from tailtheory.core.provenance import measured_on
from tailtheory.core.safeset import RULES
from tailtheory.core.stats import token_stats
from tailtheory.core.stats import map_row_blocks
from tailtheory.engine.devices import model_generator
from tailtheory.engine.policy_forward import response_logits
from tailtheory.engine.rollout.engine import HF
from tailtheory.engine.rollout.engine import PATHS, RolloutConfig, RolloutEngine
from tailtheory.engine.start.corpus_lm import CorpusLMConfig
from tailtheory.engine.start.corpus_lm import (EOT, PAD, corpus_lm, heldout_batch, load_corpus_lm,
                                               read_corpus_record)
from tailtheory.engine.start.sft import config_hash
from tailtheory.engine.start.warm_cache import load_warm_start, read_record
from tailtheory.engine.threads import torch_threads
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.presets import warm_sft_config
from tailtheory.mismatch.real import paired_logits
from tailtheory.pruning.sweep import RHO_SWEEP, pruning_sweep, remaining_mismatch
from tailtheory.pruning.sweep import pruning_knee

OUTLIER_TAUS = (0.01, 0.03, 0.1)
"""``tau`` of the outlier rates ``P(|Delta| > tau)`` of sampled tokens: 0.1 is V2's "heavy"
threshold (``tailtheory.tim.claims.V2_MAX_HEAVY``, a tenth of O(1)); 0.01 and 0.03 sit at a few
times the typical bf16 ``|Delta|`` of a trained model (bfloat16 keeps 8 significant bits: a
relative rounding of 2^-9 = 0.002 per operation). Fixed before the full measurement."""

SEQ_QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)
"""Quantiles reported of the sequence log-ratio
``log pi_train(y) / pi_infer(y) = -sum_t Delta_t``."""

P_BIN_EDGES = (1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9)
"""Inner edges of the bins of the trainer's ``p`` in :func:`mass_shares`: [0, 1e-8), ...,
[0.9, 1]."""

TAIL_P = 1e-3
"""Tokens below this trainer probability are the tail in the share summaries (M7's ``TAIL_P``)."""

PROPORTIONAL_TV = 0.25
"""Descriptive only (not part of P4's verdict): the mismatch counts as spread over tokens roughly
in proportion to sampled mass when the total-variation distance between the per-bin shares of
``E|Delta|`` and of sampler mass is at most this. Fixed before measuring."""

P4_TRAINED_VERSION = 1
"""Part of the stored measurement's config: bump when this module measures differently."""


@dataclass(frozen=True)
class TrainedP4Config:
    """What P4's trained-model measurement runs (the stored measurement is keyed by it)."""

    corpus: CorpusLMConfig = CorpusLMConfig()
    """The corpus LM (trained once, cached: :func:`tailtheory.engine.start.corpus_lm.corpus_lm`)."""
    policy_preset: str = "full"
    """Warm start of the task policy (``tailtheory.experiments.presets.warm_model``); never retrained."""
    path: str = "bf16"
    """Rollout path of the sampler (the real bf16 copy, as in M7 / V2)."""
    rule: str = "min_p"
    rhos: tuple = RHO_SWEEP
    text_windows: int = 32
    text_len: int = 128
    """``corpus_text``: held-out windows (B, L)."""
    corpus_prompts: int = 64
    corpus_prompt_len: int = 32
    corpus_new_tokens: int = 64
    """``corpus_rollout``: held-out prefixes and the tokens sampled after them."""
    policy_prompts: int = 64
    """``policy_rollout``: held-out task prompts (responses up to the task's own cap)."""
    prompt_seed: int = 202
    """Seed of the held-out windows / task problems (the warm start used 100 and 101)."""
    sample_seed: int = 0
    """Generator seed of every rollout (the same for every ``rho``: common random numbers)."""
    taus: tuple = OUTLIER_TAUS
    """Thresholds of the sampled tokens' outlier rates (:data:`OUTLIER_TAUS`)."""

    def __post_init__(self):

        if self.path not in PATHS:   # "exact" is the zero-mismatch control (V1)
            raise ValueError(f"path must be one of {PATHS}, got {self.path!r}")
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")
        if not self.rhos or any(not 0 < r <= 1 for r in self.rhos) or list(self.rhos) != sorted(
                self.rhos):
            raise ValueError(f"rhos must be increasing thresholds in (0, 1], got {self.rhos}")
        if not self.taus or any(not t > 0 for t in self.taus):
            raise ValueError(f"taus must be positive, got {self.taus}")
        for name in ("text_windows", "text_len", "corpus_prompts", "corpus_prompt_len",
                     "corpus_new_tokens", "policy_prompts"):
            check_positive_int(getattr(self, name), name)


def mass_shares(logits, perturbed_logits, resp_mask=None, edges=P_BIN_EDGES):
    """Where the mismatch sits: per bin of the trainer's ``p``, the share of the sampler's mass
    ``q``, of ``E_q|Delta|`` and of ``KL(q || p)``.

    Source: DVP (P4), M4. Sums over every token of every alive position (exact expectations under
    the sampler ``q = softmax(z')``, no sampling). The KL is split into the non-negative terms
    ``KL = sum_j p_j phi(q_j / p_j)``, ``phi(r) = r log r - r + 1 >= 0`` (the ``- q_j + p_j``
    added to ``q_j Delta_j`` sum to 0), so that no bin's share is negative; a share is NaN when
    there is no mismatch at all. Float64 blocks of rows.
    Shapes: logits, perturbed_logits (B, T, V), resp_mask (B, T) -> DataFrame, one row per bin:
    ``p_lo, p_hi, mass_share, abs_share, kl_share``.
    """
    import pandas as pd


    z = check_logits(logits, dtype=None)
    zp = check_logits(perturbed_logits, "perturbed_logits", dtype=None)
    check_same_shape(z, zp, ("logits", "perturbed_logits"))
    e = torch.tensor(edges, dtype=torch.float64, device=z.device)
    sums = map_row_blocks(lambda a, b: _share_rows(a, b, e), z, zp)      # (..., 3, nb)
    alive = (torch.ones(z.shape[:-1], dtype=torch.bool, device=z.device) if resp_mask is None
             else resp_mask.bool())
    tot = sums[alive].sum(0).cpu()                                        # (3, nb)
    lo = (0.0, *edges)
    return pd.DataFrame({"p_lo": lo, "p_hi": (*edges, 1.0),
                         "mass_share": (tot[0] / tot[0].sum()).numpy(),
                         "abs_share": (tot[1] / tot[1].sum()).numpy(),
                         "kl_share": (tot[2] / tot[2].sum()).numpy()})


def _share_rows(z, zp, edges) -> torch.Tensor:
    """Per row and bin: ``sum q``, ``sum q |Delta|``, ``sum p phi(q/p)``. (r, V) -> (r, 3, nb)."""
    lp, lq = torch.log_softmax(z.double(), -1), torch.log_softmax(zp.double(), -1)
    p, q, D = lp.exp(), lq.exp(), lq - lp
    em1 = torch.expm1(D)
    kl = p * ((D - em1) + D * em1)           # p phi(e^D) = p (D e^D - e^D + 1), no cancellation
    idx = torch.bucketize(p, edges, right=True)                           # (r, V) bin of p
    out = torch.zeros(z.shape[0], 3, len(edges) + 1, dtype=torch.float64, device=z.device)
    for i, v in enumerate((q, q * D.abs(), kl)):
        out[:, i].scatter_add_(1, idx, v)
    return out


def sampled_shares(p_tok, abs_delta, edges=P_BIN_EDGES):
    """The sampled-token view of :func:`mass_shares`: per bin of the trainer's ``p`` of each
    sampled token, its share of the tokens and of their summed ``|Delta|``.
    Shapes: p_tok, abs_delta (N,) -> DataFrame ``p_lo, p_hi, token_share, abs_share``."""
    import pandas as pd

    p_tok, abs_delta = p_tok.cpu(), abs_delta.cpu()
    idx = torch.bucketize(p_tok.double(), torch.tensor(edges, dtype=torch.float64), right=True)
    nb = len(edges) + 1
    n = torch.bincount(idx, minlength=nb).double()
    a = torch.zeros(nb, dtype=torch.float64).scatter_add_(0, idx, abs_delta.double())
    return pd.DataFrame({"p_lo": (0.0, *edges), "p_hi": (*edges, 1.0),
                         "token_share": (n / n.sum()).numpy(), "abs_share": (a / a.sum()).numpy()})


def share_summary(shares, mass: str = "mass_share") -> dict:
    """Summary of :func:`mass_shares` (``mass="token_share"``: of :func:`sampled_shares`): the
    total-variation distance between the ``|Delta|`` and mass shares over bins, and the ratio of
    the two shares in the tail (``p < TAIL_P``) and the head (``p >= 0.9``)."""
    m, a = shares[mass], shares.abs_share
    tail, head = shares.p_hi <= TAIL_P, shares.p_lo >= 0.9
    def ratio(b) -> float:
        return float(a[b].sum() / m[b].sum()) if m[b].sum() > 0 else float("nan")

    out = {"share_tv": float(0.5 * (a - m).abs().sum()), "tail_mass_share": float(m[tail].sum()),
           "tail_abs_share": float(a[tail].sum()), "tail_abs_over_mass": ratio(tail),
           "head_mass_share": float(m[head].sum()), "head_abs_share": float(a[head].sum()),
           "head_abs_over_mass": ratio(head)}
    if "kl_share" in shares:
        out["tail_kl_share"] = float(shares.kl_share[tail].sum())
    return out


def _rollout(model, prompts, eos_id, pad_id: int, cfg: TrainedP4Config, rho: float,
             max_new: int):
    """One engine rollout on ``cfg.path`` pruned at ``rho`` (none at 0): ``(rb, z_train)``."""

    rc = RolloutConfig(path=cfg.path, max_new_tokens=max_new, return_logits=True,
                       prune_rule=cfg.rule if rho > 0 else None, rho=rho if rho > 0 else 1e-6,
                       backend=HF)
    g = model_generator(model, cfg.sample_seed)
    rb = RolloutEngine(model, rc).generate(prompts, eos_id=eos_id, pad_id=pad_id, generator=g)
    with torch.no_grad():
        return rb, response_logits(model, rb)                            # (B, T, V) float32


def sampled_mismatch(rb, z_train, taus=OUTLIER_TAUS) -> dict:
    """The mismatch of the tokens the engine sampled, next to the full-distribution quantities of
    the same positions.

    Source: DVP (P4), TIM (V2), M6. ``Delta_t = rb.logp - logp_train`` (both on the sampler's
    ``S``), the sequence log-ratio ``-sum_t Delta_t = log pi_train(y) / pi_infer(y)``; ``tok_*``
    over sampled tokens, ``seq_q*`` its quantiles over sequences, and
    :func:`~tailtheory.pruning.sweep.remaining_mismatch` of ``(z_train, rb.logits)`` on ``rb.mask``.
    Shapes: rb (B, T), z_train (B, T, V) -> dict of floats.
    """
    keep = (rb.keep if rb.keep is not None else
            torch.ones(z_train.shape, dtype=torch.bool, device=z_train.device))
    train = token_stats(z_train, rb.response, keep=rb.keep)["logp"]       # (B, T)
    Delta = (rb.logp - train).double().masked_fill(~rb.mask, 0.0)        # (B, T)
    d = Delta[rb.mask].abs()
    seq = -Delta.sum(-1)                                                  # (B,)
    qs = torch.quantile(seq, torch.tensor(SEQ_QUANTILES, dtype=torch.float64, device=seq.device))
    out = {"tokens": int(rb.mask.sum()), "tok_abs_mean": float(d.mean()),
           "tok_abs_max": float(d.max()), "tok_delta_mean": float(Delta[rb.mask].mean()),
           **{f"tok_outlier_{t:g}": float((d > t).double().mean()) for t in taus},
           "seq_abs_mean": float(seq.abs().mean()),
           **{f"seq_q{round(100 * q):02d}": float(v) for q, v in zip(SEQ_QUANTILES, qs)}}
    full = remaining_mismatch(z_train.double(), rb.logits.double(), keep, rb.mask)
    return {**out, **full}


def rollout_setting(model, prompts, eos_id, pad_id: int, max_new: int,
                    cfg: TrainedP4Config) -> dict:
    """One rollout setting: the per-``rho`` sampled table, and on the unpruned rollout's
    contexts the exact sweep, the mass shares and the sampled-token shares (JSON-ready)."""
    rows, ref = [], None
    for rho in (0.0, *cfg.rhos):
        rb, z = _rollout(model, prompts, eos_id, pad_id, cfg, rho, max_new)
        rows.append({"rho": rho, **sampled_mismatch(rb, z, cfg.taus)})
        if rho == 0:
            ref = (rb, z)
    rb, z = ref
    zp = rb.logits.double()
    sweep = pruning_sweep(z.double(), zp, cfg.rhos, cfg.rule, resp_mask=rb.mask)
    train = token_stats(z, rb.response)["logp"]                          # (B, T) unpruned
    p_tok, d_tok = train.double().exp(), (rb.logp - train).double().abs()
    return {"sampled": rows, "sweep": sweep.to_dict("records"),
            "shares": mass_shares(z, zp, rb.mask).to_dict("records"),
            "sampled_shares": sampled_shares(p_tok[rb.mask], d_tok[rb.mask]).to_dict("records")}


def measure_corpus_lm(cfg: TrainedP4Config) -> dict:
    """``corpus_text`` and ``corpus_rollout`` of the corpus LM (trained first if not cached), each
    with its fingerprint and the machine (:func:`~tailtheory.core.provenance.measured_on`)."""

    path = corpus_lm(cfg.corpus)
    model, tok = load_corpus_lm(path, device="cpu")
    named = measured_on(model)
    ids = heldout_batch(path, cfg.text_windows, cfg.text_len, seed=cfg.prompt_seed)   # (B, L)
    z, zp = paired_logits(model, ids, cfg.path)
    text = {"sweep": pruning_sweep(z, zp, cfg.rhos, cfg.rule).to_dict("records"),
            "shares": mass_shares(z, zp).to_dict("records"), **named}
    prompts = heldout_batch(path, cfg.corpus_prompts, cfg.corpus_prompt_len,
                            seed=cfg.prompt_seed + 1).tolist()
    eos, pad = tok.convert_tokens_to_ids([EOT, PAD])
    roll = {**rollout_setting(model, prompts, eos, pad, cfg.corpus_new_tokens, cfg), **named}
    rec = read_corpus_record(path)
    info = {k: rec[k] for k in ("hash", "heldout_loss", "heldout_ppl", "unigram_loss", "n_params")}
    return {"model": {**info, **rec["corpus"]}, "corpus_text": text, "corpus_rollout": roll}


def measure_policy(cfg: TrainedP4Config) -> dict:
    """``policy_rollout`` of the cached warm-started task policy, with its fingerprint and the
    machine (:func:`~tailtheory.core.provenance.measured_on`)."""
    from tailtheory.experiments.presets import warm_model

    path = warm_model(cfg.policy_preset, progress=False)
    model, task = load_warm_start(path, device="cpu")
    prompts = [p.prompt_ids for p in task.problems(cfg.policy_prompts, seed=cfg.prompt_seed)]
    roll = {**rollout_setting(model, prompts, task.stop_ids, task.pad_id, task.max_response_len,
                              cfg), **measured_on(model)}
    rec = read_record(path)
    info = {"hash": rec["hash"], "task": rec["config"]["task"], "accuracy": rec["accuracy"],
            "steps": rec["steps"], "n_params": rec["n_params"],
            "vocab_size": model.config.vocab_size}
    return {"model": info, "policy_rollout": roll}


def measure_p4_trained(cfg: TrainedP4Config = TrainedP4Config()) -> dict:
    """Every setting of P4's trained-model measurement (JSON-ready), on one CPU thread."""
    t0 = time.perf_counter()
    with torch_threads(1):
        corpus = measure_corpus_lm(cfg)
        t1 = time.perf_counter()
        policy = measure_policy(cfg)
    settings = {k: v for part in (corpus, policy) for k, v in part.items() if k != "model"}
    return {"models": {"corpus_lm": corpus["model"], "policy": policy["model"]},
            "settings": settings, "seconds": {"corpus_lm": round(t1 - t0, 1),
                                              "policy": round(time.perf_counter() - t1, 1)}}


def p4_trained_identity(cfg: TrainedP4Config = TrainedP4Config()) -> dict:
    """What the stored measurement is keyed by: ``cfg``, the warm start's hash and the constants
    of this module (the corpus LM enters through its config, not the stdlib bytes, so a machine
    with another Python reads the stored numbers instead of refusing them)."""

    return {"version": P4_TRAINED_VERSION, **asdict(cfg), "rhos": list(cfg.rhos),
            "taus": list(cfg.taus),
            "policy_warm_start": config_hash(warm_sft_config(cfg.policy_preset)),
            "edges": list(P_BIN_EDGES), "quantiles": list(SEQ_QUANTILES)}


P4_TRAINED_COMMAND = measure_command("p4_trained")
"""Regenerates ``results/p4_trained.json`` (about 3 min on one CPU thread once the corpus LM is
cached; pretraining it adds about 5 min)."""


def p4_trained_data(profile: str, cfg: TrainedP4Config = TrainedP4Config()) -> dict:
    """The stored measurement (``quick``) or a new one, stored (``thorough``)."""
    return measured("p4_trained", p4_trained_identity(cfg), lambda: measure_p4_trained(cfg),
                    profile, P4_TRAINED_COMMAND)


MEASURE = register_measure(Measure(
    "p4_trained", "DVP's pruning trade (P4) on the corpus LM's text and rollouts and on a "
    "trained policy's rollouts", "about 3 CPU minutes on one thread once the corpus LM is "
    "cached (pretraining it adds about 5)", p4_trained_identity,
    lambda: p4_trained_data("thorough")))


TRAINED_SETTINGS = ("corpus_text", "corpus_rollout", "policy_rollout")
"""The settings whose knees decide P4 (each must show it)."""


def trained_knees(data: dict, mass_negligible: float, settings=TRAINED_SETTINGS) -> dict:
    """Setting -> :func:`~tailtheory.pruning.sweep.pruning_knee` of its exact sweep, plus (rollout
    settings) the sampled-token mismatch left at the knee's ``rho``: ``tok_abs_mean_left``,
    ``tok_outlier_left`` and ``seq_abs_mean_left`` (fractions of the unpruned rollout's), for
    each of ``settings`` (:data:`TRAINED_SETTINGS`, or
    ``tailtheory.pruning.matched_tails.MATCHED_SETTINGS``)."""
    import pandas as pd


    out = {}
    for name in settings:
        s = data["settings"][name]
        knee = pruning_knee(pd.DataFrame(s["sweep"]), mass_negligible)
        if "sampled" in s:
            df = pd.DataFrame(s["sampled"])
            ref, at = df.iloc[0], df[df.rho == knee["rho"]]
            for c, key in (("tok_abs_mean", "tok_abs_mean_left"),
                           (f"tok_outlier_{OUTLIER_TAUS[0]:g}", "tok_outlier_left"),
                           ("seq_abs_mean", "seq_abs_mean_left")):
                ok = len(at) and ref[c] > 0
                knee[key] = float(at[c].iloc[0] / ref[c]) if ok else 1.0
        out[name] = knee
    return out
