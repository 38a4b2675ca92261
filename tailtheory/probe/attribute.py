"""``tailtheory probe mismatch --attribute``: a model's mismatch attributed to its knobs.

"Which knob causes my mismatch?": NeMo-RL issue 4243 turns the knobs one at a time by hand,
verl issue 6280 measures batch shape, OpenRLHF issue 1155 asks about fp16. Here each knob is
turned alone against one reference, then the serving combination all at once.

**Reference** (:data:`REFERENCE`): the float32 model, one full forward (no KV cache) over each
window alone (batch 1, no padding), eager attention: the trainer's pass
(:func:`tailtheory.core.forward.hidden_forward`). **Arms** (:func:`arms`), each changing one thing:

- ``reference``: the reference run again, the same function on the same shapes: the floor of the
  instrument (bitwise equal on one machine, k3 = 0 exactly; a GPU's non-deterministic kernels may
  leave something, which is then what no knob can be told apart from);
- ``bf16``, ``fp16``: the inference copy in that dtype (``copies.inference_copy``); ``fp16`` is
  reported apart and left out of the combination (an engine serves one 16-bit dtype);
- ``kv``: float32 decoding one token at a time through the KV cache (``real.kv_decode``);
- ``batch8``, ``batch32``: the window as the first row of a batch of 8 or 32, the others windows
  of the probed text (read cyclically) of lengths uniform in :data:`FILLER_RANGE` times ``L``
  (``batch_shape.ragged_windows``), left-padded and masked, positions counted from each row's
  first real token (``core.forward.left_pad``): the trainer's padded batch;
- ``sdpa`` (``--attention``, :data:`ATTENTIONS`): the attention kernel swapped for PyTorch's
  ``scaled_dot_product_attention``; a model without it gets a note and no numbers;
- ``combined``: bf16 + kv + batch 32 + sdpa: the bf16 copy with sdpa decoding the window through
  the KV cache as the first of 32 rows, the rollout engine's setting. Its rows are right-padded (a
  row that ends early is fed pads, as the engine feeds its finished rows) and cut at ``L``: under
  causal attention nothing after a position reaches it, so of the batch only its size changes
  the probed row's kernels.

**Per arm**, on the windows' observed tokens (``t = 1 .. L-1``, each predicted from those before
it; ``B (L - 1)`` tokens): ``log rho = logp_ref - logp_arm`` (``pi_train / pi_roll``, the
reference as the trainer, the arm as the engine: the sign of the engine's ``mismatch/k3`` and of
``tailtheory diagnose``; ``-Delta`` of ``tailtheory.mismatch``), and from it
(``batch_shape.shape_stats``) the mean ``k3 = rho - 1 - log rho``, the share of tokens whose
``rho`` leaves ``[0.9, 1.1]`` with its count and Clopper-Pearson 95% interval
(``ladder.probes.share_interval``), the share bitwise equal, the share with ``|log rho| > 1e-3``
and the largest ``|log rho|``; and M7's slope of ``log10 mean|Delta|`` against ``log10 (1 - p)``
over every vocabulary entry at every position (``claims.binned_envelope_slope``: 1 is M3's
``(1 - p)`` envelope; NaN with fewer than 3 bins of ``1e-6 <= 1 - p <= 0.9``, as on a
near-uniform model, which has no ``p >= 0.1``).

**Interaction residual** ``= k3(combined) - sum of k3(bf16, kv, batch32, sdpa)``, on k3's own
scale. To second order ``k3 = (log rho)^2 / 2``: when the knobs' log-ratios add and are
uncorrelated with mean zero, the mean of the square of their sum is the sum of their means, so
k3 is additive to leading order and the residual is 0 up to higher-order terms. A positive
residual says the knobs compound (their perturbations correlate), a negative one that they
partly cancel. It is a difference of measurements, not an equality check: only the
``reference`` arm (same function, same shapes) is compared bitwise (STYLE rule 20).

Memory: each arm's hidden states, one window at a time, go through its LM head beside the
reference's a chunk of positions at a time (``chunked.head_chunks``); no ``(L, V)`` tensor is
formed. Cost: ``batch32`` and ``combined`` run 32 rows a window, ``batch8`` 8 (measured costs:
``docs/own_model.md``). Shapes: ids (B, L); hidden (L, H); chunks (n, V).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from tailtheory.core.estimators import k3
from tailtheory.core.forward import hidden_forward, left_pad
from tailtheory.core.models import ATTENTION
from tailtheory.engine.rollout.copies import inference_copy
from tailtheory.ladder.probes import share_interval
from tailtheory.mismatch.batch_shape import ragged_windows, shape_stats
from tailtheory.mismatch.chunked import NonFiniteLogits, chunk_rows, head_chunks
from tailtheory.mismatch.claims import M7_Q_RANGE, binned_envelope_slope
from tailtheory.mismatch.logprob import logprob_mismatch
from tailtheory.mismatch.real import _check_input_ids, kv_decode

REFERENCE = "float32, full forward, batch 1, eager attention"
"""The reference every arm is measured against (module docstring)."""

ATTENTIONS = ("sdpa",)
"""Attention kernels the attention arm may swap in for the reference's eager one. Left out:
``flex_attention`` compiles per shape on a CPU (7 to 10 s a shape on a tiny model, and every
decoding step of the ``combined`` arm is a shape); the flash kernels need CUDA and their own
packages."""

FILLER_RANGE = (0.5, 1.5)
"""The batch arms' other windows are ``L`` times a length uniform in this range (within the
model's positions): some longer than the probed window, so it is padded too."""

COLUMNS = ("arm", "group", "knobs", "note", "tokens", "k3", "k3_se", "outside",
           "outside_tokens", "outside_low", "outside_high", "equal", "over_1e3", "max_abs",
           "m7_slope", "m7_bins", "seconds")
"""The table's columns: one row per arm, then the residual's."""


@dataclass(frozen=True)
class Arm:
    """One arm: the reference with the knobs named here turned."""

    name: str
    dtype: str = "float32"
    """``float32`` (the model), ``bf16`` or ``fp16`` (its inference copy)."""
    kv: bool = False
    """Decode one token at a time through the KV cache (else one full forward)."""
    batch: int = 1
    """Rows of the batch the window is scored in (1: alone)."""
    attention: str = ATTENTION
    group: str = "single"
    """``floor`` (the reference again), ``single`` (one knob; summed for the residual),
    ``apart`` (one knob, not in the combination) or ``combined``."""

    @property
    def knobs(self) -> str:
        parts = [f"{self.dtype} copy" if self.dtype != "float32" else "",
                 "KV-cache decoding" if self.kv else "",
                 (f"batch {self.batch} ({'right' if self.kv else 'left'}-padded)"
                  if self.batch > 1 else ""),
                 f"{self.attention} attention" if self.attention != ATTENTION else ""]
        return " + ".join(p for p in parts if p) or f"none ({REFERENCE}, again)"


def arms(attention: str = "sdpa") -> tuple[Arm, ...]:
    """The arms of the module docstring, ``attention`` the attention arm's kernel."""
    if attention not in ATTENTIONS:
        raise ValueError(f"unknown attention implementation {attention!r}; valid: "
                         f"{', '.join(ATTENTIONS)}")
    return (Arm("reference", group="floor"), Arm("bf16", "bf16"), Arm("kv", kv=True),
            Arm("batch8", batch=8), Arm("batch32", batch=32), Arm(attention, attention=attention),
            Arm("combined", "bf16", True, 32, attention, "combined"),
            Arm("fp16", "fp16", group="apart"))


class AttentionUnavailable(ValueError):
    """The model cannot run the attention kernel an arm asks for."""


def with_attention(model, impl: str, own: bool = False):
    """``model`` computing its attention with ``impl`` (``transformers``'
    ``set_attn_implementation``): a deep copy, or ``model`` itself when ``own`` (a copy made
    for the arm). A model that cannot is :class:`AttentionUnavailable` (``set_attn_implementation``
    only warns when the model cannot switch, so the config is read back)."""
    if impl == "sdpa" and not getattr(model, "_supports_sdpa", False):
        raise AttentionUnavailable(f"{type(model).__name__} does not support sdpa attention")
    m = model if own else copy.deepcopy(model)
    try:
        m.set_attn_implementation(impl)
    except (ValueError, ImportError) as exc:
        raise AttentionUnavailable(str(exc).splitlines()[0]) from None
    if getattr(m.config, "_attn_implementation", None) != impl:
        raise AttentionUnavailable(f"{type(model).__name__} cannot switch its attention to {impl}")
    return m.eval()


def arm_model(model, arm: Arm):
    """The model an arm runs: ``model`` itself, its inference copy, either with its attention."""
    m = model if arm.dtype == "float32" else inference_copy(model, arm.dtype)
    return m if arm.attention == ATTENTION else with_attention(m, arm.attention, m is not model)


def fillers(ids: torch.Tensor, batch: int, seed: int, max_len: int) -> list[list[list[int]]]:
    """For each window of ``ids (B, L)``, the ``batch - 1`` other rows of its batch: windows of
    the probed text read cyclically (:func:`ragged_windows`), lengths in :data:`FILLER_RANGE`
    times ``L`` and at most ``max_len``; drawn from ``seed`` and ``batch``."""
    B, L = ids.shape
    lo = max(2, math.floor(FILLER_RANGE[0] * L))
    hi = max(lo, min(max_len, math.ceil(FILLER_RANGE[1] * L)))
    stream = ids.flatten().cpu().repeat(2)                               # (2 B L,)
    rows = ragged_windows(stream, B * (batch - 1), lo, hi, seed=seed * 1000 + batch)
    return [rows[i * (batch - 1):(i + 1) * (batch - 1)] for i in range(B)]


def _right_pad(rows: list[list[int]], L: int, pad_id: int) -> torch.Tensor:
    """Rows cut at ``L`` columns, shorter ones right-padded with ``pad_id``. -> (b, L) long."""
    out = torch.full((len(rows), L), int(pad_id), dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :min(L, len(r))] = torch.as_tensor(r[:L], dtype=torch.long)
    return out


@torch.no_grad()
def arm_hidden(m, arm: Arm, w: torch.Tensor, others: list[list[int]], pad_id: int = 0):
    """The last hidden states of window ``w (L,)`` under ``arm`` (its model ``m``), ``others``
    the rest of its batch (module docstring; pads are masked or follow the window, so
    ``pad_id``'s value reaches no probed position). -> (L, H)."""
    L, dev = w.shape[0], w.device
    if arm.batch == 1:
        ids = w[None]                                                    # (1, L)
    elif arm.kv:
        ids = _right_pad([w.tolist(), *others], L, pad_id).to(dev)       # (b, L)
    else:
        ids, attn, _ = left_pad([w.tolist(), *others], pad_id, m.config.vocab_size)
        h = hidden_forward(m, ids.to(dev), attn.to(dev))                 # (b, P, H)
        return h[0, ids.shape[1] - L:]
    if arm.kv:
        return kv_decode(m.get_decoder(), ids, "last_hidden_state")[0]
    return hidden_forward(m, ids)[0]


class ArmFold:
    """An arm's observed-token ``log rho`` and M7's tokens, folded in chunk by chunk: the same
    numbers as ``shape_stats`` and ``envelope_slope`` on the whole ``(L, V)`` logits (tested)."""

    def __init__(self):
        self.log_rho, self.abs_Delta, self.q = [], [], []

    def add(self, r: slice, z: torch.Tensor, zi: torch.Tensor, w: torch.Tensor) -> None:
        """Fold in positions ``r`` of window ``w (L,)``: logits ``z`` (reference), ``zi`` (arm),
        each ``(n, V)``."""
        Delta = logprob_mismatch(z, zi)                                  # (n, V) float64
        q = 1 - torch.softmax(z.double(), -1)                            # (n, V)
        pos = torch.arange(r.start, r.stop, device=w.device)
        obs = pos < w.shape[0] - 1                                       # has a next token
        self.log_rho.append(-Delta[obs, w[pos[obs] + 1]].cpu())
        sel = (q >= M7_Q_RANGE[0]) & (q <= M7_Q_RANGE[1])                # sparse: p >= 0.1
        self.abs_Delta.append(Delta[sel].abs().cpu())
        self.q.append(q[sel].cpu())

    def row(self) -> tuple[dict, torch.Tensor]:
        """``(row, per-token k3 (B (L-1),))``."""
        log_rho = torch.cat(self.log_rho)
        st, tok = shape_stats(log_rho), k3(log_rho)
        n, k = st["tokens"], round(st["outside"] * st["tokens"])
        low, high = share_interval(k, n)
        slope, bins = binned_envelope_slope(torch.cat(self.abs_Delta), torch.cat(self.q))
        return {"tokens": n, "k3": st["k3"], "k3_se": _se(tok), "outside": st["outside"],
                "outside_tokens": k, "outside_low": low, "outside_high": high,
                "equal": st["equal"], "over_1e3": st["over_1e3"], "max_abs": st["max_abs"],
                "m7_slope": slope, "m7_bins": bins}, tok


def _se(x: torch.Tensor) -> float:
    """The standard error of the mean of ``x``, its entries taken as independent (the tokens
    of one window are not, so it understates: a guide to the noise, not an interval)."""
    return float(x.std() / math.sqrt(x.numel())) if x.numel() > 1 else math.nan


@torch.no_grad()
def measure_arm(model, arm: Arm, ids: torch.Tensor, h_ref: list,
                others: dict) -> tuple[dict, torch.Tensor | None]:
    """One row of the table and the arm's per-token k3: ``arm`` against the reference's hidden
    states ``h_ref`` (one ``(L, H)`` a window) on ``ids (B, L)``; ``others``: batch size ->
    :func:`fillers`. An arm the model cannot run, or whose logits overflow, gets a note and no
    numbers (and ``None``)."""
    row = {"arm": arm.name, "group": arm.group, "knobs": arm.knobs, "note": ""}
    t0 = time.perf_counter()
    head = model.get_output_embeddings()
    try:
        m = arm_model(model, arm)
        fold, rows = ArmFold(), chunk_rows(model.config.vocab_size)
        for i, w in enumerate(ids):
            hi = arm_hidden(m, arm, w, others.get(arm.batch, [[]] * len(ids))[i])
            for r, z, zi in head_chunks((h_ref[i], head), (hi, m.get_output_embeddings()),
                                        rows, arm.name):
                fold.add(r, z, zi, w)
    except (AttentionUnavailable, NonFiniteLogits) as exc:
        return {**row, "note": f"not available: {exc}"}, None
    numbers, tok = fold.row()
    return {**row, **numbers, "seconds": time.perf_counter() - t0}, tok


def residual_row(tok: dict, attention: str) -> dict:
    """The interaction residual from the arms' per-token k3 (``tok``: arm -> tensor or None):
    the combined arm's k3 minus the sum of its knobs' (module docstring), with the standard
    error of that per-token difference (:func:`_se`); a note when an arm it needs has none."""
    parts = ("bf16", "kv", "batch32", attention)
    row = {"arm": "residual", "group": "residual", "knobs": "interaction"}
    if any(tok.get(a) is None for a in ("combined", *parts)):
        return {**row, "note": "not available: an arm it needs has no numbers"}
    diff = tok["combined"] - sum(tok[p] for p in parts)                   # (B (L-1),)
    value, whole = float(diff.mean()), float(tok["combined"].mean())
    share = f"; {value / whole:+.0%} of combined" if whole else ""
    return {**row, "note": f"combined - ({' + '.join(parts)}){share}", "tokens": diff.numel(),
            "k3": value, "k3_se": _se(diff)}


def attribute_mismatch(model, input_ids, attention: str = "sdpa", seed: int = 0) -> pd.DataFrame:
    """Each knob's mismatch on ``model`` and windows ``input_ids (B, L)`` against the reference,
    the combination and the interaction residual (module docstring): the table of
    :data:`COLUMNS`. ``model``: the float32 trainer with eager attention
    (``tailtheory.core.models.load_lm``); ``seed`` draws the batch arms' other windows."""
    if getattr(model.config, "_attn_implementation", None) != ATTENTION:
        raise ValueError(f"the reference is {REFERENCE}: load the model with eager attention "
                         f"(tailtheory.core.models.load_lm), not "
                         f"{model.config._attn_implementation}")
    plan = arms(attention)
    dev = next(model.parameters()).device
    ids = _check_input_ids(input_ids, model.config.vocab_size).to(dev)
    limit = getattr(model.config, "max_position_embeddings", None) or 2 * ids.shape[1]
    others = {b: fillers(ids, b, seed, limit) for b in {a.batch for a in plan} - {1}}
    with torch.no_grad():
        h_ref = [hidden_forward(model, w[None])[0] for w in ids]         # (L, H) each
    rows, tok = [], {}
    for a in plan:
        row, tok[a.name] = measure_arm(model, a, ids, h_ref, others)
        rows.append(row)
    rows.append(residual_row(tok, attention))
    table = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    return table.astype({c: "Int64" for c in ("tokens", "outside_tokens", "m7_bins")})


def plot_attribution(table: pd.DataFrame):
    """Bars of each arm's k3 on a log axis: the single knobs, the combination (a tick marks the
    sum of its knobs), ``|residual|`` (hatched; its sign written), fp16 apart at the right. A
    k3 of 0 (bitwise equal) or an arm without numbers is written at the bottom, not drawn.
    -> ``(fig, table)``."""
    order = [r for g in ("floor", "single", "combined", "residual", "apart")
             for r in table.index[table.group == g]]
    t = table.loc[order]
    vals = t.k3.to_numpy(dtype=float)
    colors = {"floor": "0.75", "single": "C0", "combined": "C3", "residual": "C3",
              "apart": "0.45"}
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    x = np.arange(len(t))
    pos = np.where(np.isfinite(vals) & (vals != 0), np.abs(vals), np.nan)
    floor = np.nanmin(pos) / 10 if np.isfinite(pos).any() else 1e-12
    for i, (g, v, a) in enumerate(zip(t.group, vals, pos)):
        if np.isfinite(a):
            ax.bar(i, a, color=colors[g], hatch="//" if g == "residual" else None,
                   edgecolor="k", linewidth=0.5)
            if g == "residual":
                ax.annotate("positive" if v > 0 else "negative", (i, a), ha="center",
                            va="bottom", fontsize=8)
        else:
            ax.text(i, floor, "0" if v == 0 else "n/a", ha="center", va="bottom")
    by = dict(zip(t.arm, vals))
    knobs = by.get("combined", math.nan) - by.get("residual", math.nan)  # the knobs' k3 summed
    if np.isfinite(knobs) and knobs > 0:
        i = list(t.arm).index("combined")
        ax.hlines(knobs, i - 0.4, i + 0.4, colors="k", linestyles="--", label="sum of its knobs")
        ax.legend(loc="upper left", fontsize=8)
    if "apart" in set(t.group):
        ax.axvline(list(t.group).index("apart") - 0.5, color="0.6", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylim(floor, np.nanmax(pos) * 30 if np.isfinite(pos).any() else 1.0)
    ax.set_xticks(x, [a if a != "residual" else "|residual|" for a in t.arm], rotation=20)
    ax.set_ylabel("mean k3 of log rho")
    ax.set_title(f"mismatch by knob against the reference ({REFERENCE})", fontsize=10)
    fig.tight_layout()
    return fig, table
