"""Dumps with planted faults and their clean twins, for the certification, the resume check, the
sequence-ratio and the drift sections, written by the frameworks' own writer code the other
tests use: the generic format through ``tailtheory.integrations.dump`` (what the TRL and verl
hooks write), this engine's ``dump_tokens``, and the framework layouts of
``tests/diagnose/formats/framework_dumps.py``.

``python -m tests.diagnose.planted`` writes the committed fixtures of ``docs/diagnose.md``'s
worked examples into ``tests/diagnose/data/`` (:data:`COMMITTED`).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

DATA = Path(__file__).parent / "data"
"""The committed fixtures."""


def planted_responses(steps=range(20), per_step=2, lengths=(4,), sd=0.02, loud=(), loud_sd=0.3,
                      drift=0.0, seed=0, decimals=3) -> list[dict]:
    """Responses in ``framework_dumps``' shape (``step``, ``i``, ``prompt``, ``resp``,
    ``lp_train``, ``lp_roll``, ``adv``, ``reward``): ``log rho_t = lp_train - lp_roll`` drawn
    from ``N(drift, sd)``, ``N(drift, loud_sd)`` at the steps ``loud`` (a mean k3 of about
    ``loud_sd^2 / 2``); response ``i`` of a step has ``lengths[i % len(lengths)]`` tokens; the
    log-probs are rounded to ``decimals`` (``None``: kept), the rollout's kept ``<= 0``."""
    rng = np.random.default_rng(seed)
    out = []
    for step in steps:
        for i in range(per_step):
            n = lengths[i % len(lengths)]
            lp = np.log(rng.uniform(0.05, 0.95, n))
            lr = rng.normal(drift, loud_sd if step in loud else sd, n)
            out.append(response(rng, step, i, lp, np.minimum(lp - lr, 0.0), decimals))
    return out


def response(rng, step, i, lp_train, lp_roll, decimals) -> dict:
    """Response ``i`` of ``step`` in ``framework_dumps``' shape, its log-probs rounded to
    ``decimals`` (``None``: kept), its token ids drawn from ``rng``, advantage ``+-0.5`` and
    reward 0 or 1 by the parity of ``i``."""
    if decimals is not None:
        lp_train, lp_roll = np.round(lp_train, decimals), np.round(lp_roll, decimals)
    return dict(step=step, i=i, prompt=[1, 2, 3],
                resp=rng.integers(5, 99, len(lp_train)).tolist(), lp_train=lp_train,
                lp_roll=lp_roll, adv=float(i % 2 - 0.5), reward=float(i % 2))


def padded(resps) -> tuple[torch.Tensor, ...]:
    """``(tokens, lp_train, lp_roll, mask)`` of ``resps``, right-padded. Shapes: (B, T) each."""
    T = max(len(r["resp"]) for r in resps)
    tok = torch.zeros(len(resps), T, dtype=torch.long)
    lt, lr = torch.zeros(len(resps), T, dtype=torch.float64), torch.zeros(len(resps), T,
                                                                            dtype=torch.float64)
    mask = torch.zeros(len(resps), T, dtype=torch.bool)
    for b, r in enumerate(resps):
        n = len(r["resp"])
        tok[b, :n] = torch.tensor(r["resp"])
        lt[b, :n], lr[b, :n] = torch.from_numpy(r["lp_train"]), torch.from_numpy(r["lp_roll"])
        mask[b, :n] = True
    return tok, lt, lr, mask


AGGREGATIONS = {"sum": lambda S, n: math.exp(S), "mean": lambda S, n: math.exp(S / n),
                "-sum": lambda S, n: math.exp(-S)}
"""A logged sequence ratio from a response's ``sum_t log rho_t`` and its tokens."""


def generic_dump(path, resps, ratio: str | None = None) -> Path:
    """``resps`` in the generic format's sequence rows, one step at a time, through
    ``tailtheory.integrations.dump`` (the TRL / verl hooks' writer); with ``ratio`` (a key of
    :data:`AGGREGATIONS`), each row's ``logged_ratio``: its sequence ratio aggregated so, as a
    framework logs its own."""
    from tailtheory.integrations.dump import JsonlDump, sequence_records

    dump = JsonlDump(path)
    for step in sorted({r["step"] for r in resps}):
        batch = [r for r in resps if r["step"] == step]
        tok, lt, lr, mask = padded(batch)
        recs = sequence_records(tok, lt, lr, mask, step=step, sample_ids=[r["i"] for r in batch],
                                rewards=torch.tensor([r["reward"] for r in batch]))
        for rec in recs if ratio else ():
            S = float(np.sum(np.subtract(rec["logp_train"], rec["logp_rollout"])))
            rec["logged_ratio"] = AGGREGATIONS[ratio](S, len(rec["position"]))
        dump.write(recs)
    return Path(path)


def engine_dump(run, resps, weight: str = "mis") -> Path:
    """``resps`` as this engine's ``dump_tokens`` writes a step, one file per step; ``weight``
    is the step's correction weight: a registered method's (``mis``, ``seq_tis``, ``tis``,
    ``icepop``) at the engine's defaults, ``geometric`` (``exp(mean_t log rho_t)`` on every
    token, TIM's ``seq_log_ratio`` with ``geometric``) or ``ones`` (no correction)."""
    from tailtheory.engine.registry import get_method
    from tailtheory.engine.trainer import dump_tokens
    from tailtheory.engine.types import MethodParams, PolicyBatch
    from tailtheory.tim.corrections import seq_log_ratio

    for step in sorted({r["step"] for r in resps}):
        batch = [r for r in resps if r["step"] == step]
        tok, lt, lr, mask = padded(batch)
        b = PolicyBatch(logp=lt, old_logp=lt, roll_logp=lr, mask=mask,
                        adv=torch.tensor([r["adv"] for r in batch])[:, None].expand_as(lt),
                        group_ids=torch.zeros(len(batch), dtype=torch.long))
        if weight == "geometric":
            w = seq_log_ratio(b.log_rho, mask, geometric=True).exp()[:, None].expand_as(lt)
        elif weight == "ones":
            w = torch.ones_like(lt)
        else:
            w, _ = get_method(weight).fn(b, MethodParams())
        dump_tokens(Path(run), step, replace(b, weight=w),
                    SimpleNamespace(response=tok))
    return Path(run)


def certify_fail(path) -> Path:
    """The committed certification example: 20 steps of one five-token response, log rho of
    sd 0.02 (a mean k3 near 2e-4), steps 5 and 12 planted at sd 0.3 (about 0.045, above the
    bar 0.015)."""
    return generic_dump(path, planted_responses(per_step=1, lengths=(5,), loud=(5, 12), seed=61))


def ratio_responses() -> list[dict]:
    """The responses of the committed ratio example: 4 of 4 to 100 tokens at a mean log rho of
    0.012 per token (TRL issue 4772's)."""
    return planted_responses(steps=(0,), per_step=4, lengths=(4, 16, 64, 100), sd=0.005,
                             drift=0.012, seed=4)


def ratio_mean(path) -> Path:
    """The committed ratio example: :func:`ratio_responses`, their logged ratio
    ``exp(mean_t log rho_t)`` (a mean in place of the sum)."""
    return generic_dump(path, ratio_responses(), ratio="mean")


def resume_jump(path) -> Path:
    """The committed resume example: 16 steps of one five-token response, log rho of sd 0.02,
    steps 10, 11 and 12 (the first three after a resume at step 10) planted at sd 0.3, as in
    slime issue 1695 (high log-prob differences for a few steps after a resume)."""
    return generic_dump(path, planted_responses(steps=range(16), per_step=1, lengths=(5,),
                                                loud=(10, 11, 12), seed=1695))


def drift_responses(steps=range(40), onset=20, per_step=4, length=8, grow=(1.0, 1.0, 1.0),
                    eps=0.05, q_max=0.5, edge=False, seed=0, decimals=3) -> list[dict]:
    """Responses in ``framework_dumps``' shape whose mismatch has M3's small-eps form: per
    token, the rollout's probability of the sampled token is ``p = 1 - q`` with ``q ~ U(0,
    q_max)`` and ``log rho = 2 eps q u``, ``u ~ N(0, 1)`` (``edge``: ``u = +-1``, every token on
    M3's small-eps envelope), so that a step's mean k3 is about ``2 eps^2 E[(1 - p)^2]``. From
    step ``onset`` on, ``grow = (length, peakiness, scale)``: the responses' length, ``E[(1 -
    p)^2]`` (through ``q_max``) and ``eps^2`` grow geometrically, reaching these factors at the
    last step (1: flat; below 1: shrinking, e.g. a peakiness below 1 is a sharpening). The
    log-probs are rounded to ``decimals``."""
    rng = np.random.default_rng(seed)
    steps = list(steps)
    out = []
    for step in steps:
        f = min(max((step - onset + 1) / max(steps[-1] - onset + 1, 1), 0.0), 1.0)
        n = max(1, round(length * grow[0] ** f))
        qm, e = q_max * grow[1] ** (f / 2), eps * grow[2] ** (f / 2)
        if qm >= 1:
            raise ValueError(f"q_max grows to {qm:.3g} >= 1 at step {step}")
        for i in range(per_step):
            q = rng.uniform(0.0, qm, n)
            lp_roll = np.log1p(-q)
            u = rng.choice([-1.0, 1.0], n) if edge else rng.normal(size=n)
            out.append(response(rng, step, i, np.minimum(lp_roll + 2 * e * q * u, 0.0), lp_roll,
                                decimals))
    return out


def drift_onset(path) -> Path:
    """The committed drift example: 60 steps of one response, its tokens on M3's small-eps
    envelope (``abs(log rho) = 2 eps (1 - p)``, ``eps = 0.05``); from step 30 on, as in NeMo-RL
    issue 1801 (a mismatch that keeps growing), the length doubles (6 to 12 tokens), the
    distributions sharpen (``E[(1 - p)^2]`` x 0.6) and ``eps^2`` grows 20x by the last step."""
    return generic_dump(path, drift_responses(steps=range(60), onset=30, per_step=1, length=6,
                                              grow=(2.0, 0.6, 20.0), edge=True, seed=1801))


COMMITTED = {"certify_fail.jsonl": certify_fail, "ratio_mean.jsonl": ratio_mean,
             "resume_jump.jsonl": resume_jump, "drift_onset.jsonl": drift_onset}
"""The committed fixtures, by file name, and the function that writes each."""


def same_records(a, b, rel=1e-12) -> bool:
    """Two JSON lines files hold the same records, floats equal to ``rel`` (``exp`` and ``log``
    may differ in their last bit between machines)."""
    ra, rb = ([json.loads(x) for x in Path(f).read_text().splitlines()] for f in (a, b))
    flat = lambda r: [(k, x) for k, v in r.items() for x in (v if isinstance(v, list)  # noqa
                                                            else [v])]
    return len(ra) == len(rb) and all(
        [k for k, _ in flat(x)] == [k for k, _ in flat(y)]
        and all(u == v or (isinstance(u, float) and math.isclose(u, v, rel_tol=rel))
                for (_, u), (_, v) in zip(flat(x), flat(y)))
        for x, y in zip(ra, rb))


def shifted_context(resps, which, seed=0, decimals=3) -> list[dict]:
    """``resps`` with the trainer's log-probs of the responses ``which`` (``(step, i)`` pairs)
    scored in another context: drawn afresh as :func:`planted_responses` draws them (``log U(0.05,
    0.95)``, rounded to ``decimals``), so each of their tokens' ``Delta`` is of order 1 (a
    sample whose trainer saw another prompt, or other weights)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in resps:
        if (r["step"], r["i"]) in which:
            lp = np.log(rng.uniform(0.05, 0.95, len(r["resp"])))
            r = dict(r, lp_train=lp if decimals is None else np.round(lp, decimals))
        out.append(r)
    return out


NOISE_SHIFTED = ((1, 3), (3, 7))
"""The samples (step, i) of :func:`noise_responses` planted in another context."""


def noise_responses(shifted=NOISE_SHIFTED, seed=3, decimals=3, steps=range(4),
                    per_step=10) -> list[dict]:
    """The responses of the beyond-noise examples: ``per_step`` responses of 8 tokens per step,
    ``log rho`` of sd 0.02 (the run's noise), those of ``shifted`` in another context
    (:func:`shifted_context`); ``shifted=()`` is the clean twin."""
    resps = planted_responses(steps=steps, per_step=per_step, lengths=(8,), sd=0.02, seed=seed,
                              decimals=decimals)
    return shifted_context(resps, shifted, seed + 1, decimals)


def beyond_noise_shifted(path) -> Path:
    """The committed beyond-noise example: :func:`noise_responses`, 4 steps of 10 responses of
    8 tokens at a noise of sd 0.02, step 1's sample 3 and step 3's sample 7 in another
    context."""
    return generic_dump(path, noise_responses())


COMMITTED["beyond_noise.jsonl"] = beyond_noise_shifted


if __name__ == "__main__":
    for name, write in COMMITTED.items():
        (DATA / name).unlink(missing_ok=True)
        print(write(DATA / name), (DATA / name).stat().st_size, "bytes")
