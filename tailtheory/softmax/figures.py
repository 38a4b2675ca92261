"""Figures of the softmax facts (LOPTI Prop. 4.2; claims S4, S5).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``.
Notebook 01 (``make repro``) writes them into ``figures/``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from tailtheory.softmax import scores as sm
from tailtheory.core.checks import check_logits, check_tokens

WITNESS_P = (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)
"""Probabilities at which the S4 witnesses are drawn."""


def score_norm_table(logits=None, token=None, *, vocab_size: int = 64, n: int = 2000,
                     seed: int = 0) -> pd.DataFrame:
    """One row per token: ``p``, ``1 - p``, ``||e_k - p||`` and the three S4 bounds.

    Without ``logits``, ``n`` rows are drawn (:func:`tailtheory.softmax.scores.draw_logits`, half the
    tokens sampled from p, half uniform). Shapes: logits (n, V), token (n,).
    """
    if logits is None:
        g = torch.Generator().manual_seed(seed)
        logits = sm.draw_logits(n, vocab_size, g)
        token = sm.draw_tokens(logits, g)
    if token is None:
        raise ValueError("token is required when logits are given")
    z = check_logits(logits)
    z = z.reshape(-1, z.shape[-1])  # (n, V)
    k = check_tokens(torch.as_tensor(token).reshape(-1), z)
    p = torch.softmax(z, -1).gather(-1, k[:, None]).squeeze(-1)  # (n,)
    lower, upper = sm.score_norm_bounds(p, z.shape[-1])
    return pd.DataFrame({"V": z.shape[-1], "p": p.numpy(), "one_minus_p": (1 - p).numpy(),
                         "score_norm": sm.score_norm(z, k).numpy(), "lower": lower.numpy(),
                         "upper": upper.numpy(), "weak": sm.score_norm_bound_weak(p).numpy()})


def plot_score_norm(logits=None, token=None, *, vocab_size: int = 64, n: int = 2000,
                    seed: int = 0):
    """S4: ``||e_k - p||`` against ``1 - p_k`` between its bounds, with both witnesses.

    Lines: lower ``sqrt(V/(V-1))(1-p)``, upper ``sqrt(2)(1-p)``, weak ``sqrt(2(1-p))``; markers:
    the witness logits of :func:`tailtheory.softmax.scores.score_norm_witness`, which sit on the lines.
    Returns ``(fig, df)``; ``df`` has a ``kind`` column (``sample``, ``upper_witness``,
    ``lower_witness``).
    """
    import matplotlib.pyplot as plt

    df = score_norm_table(logits, token, vocab_size=vocab_size, n=n, seed=seed)
    V = int(df["V"].iloc[0])
    wit = [score_norm_table(sm.score_norm_witness(V, q, end)[None], [0]).assign(
        kind=f"{end}_witness") for end in ("upper", "lower") for q in WITNESS_P]
    df = pd.concat([df.assign(kind="sample"), *wit], ignore_index=True)
    q = np.linspace(0, 1, 201)
    fig, ax = plt.subplots(figsize=(5, 3.8))
    s = df[df.kind == "sample"]
    ax.scatter(s.one_minus_p, s.score_norm, s=4, alpha=0.35, color="0.3", label="sampled tokens")
    ax.plot(q, np.sqrt(2) * q, color="C3", label=r"$\sqrt{2}(1-p)$")
    ax.plot(q, np.sqrt(V / (V - 1)) * q, color="C0", label=rf"$\sqrt{{V/(V-1)}}(1-p)$, V={V}")
    ax.plot(q, np.sqrt(2 * q), color="C3", ls=":", label=r"$\sqrt{2(1-p)}$")
    for end, m, c in (("upper", "^", "C3"), ("lower", "v", "C0")):
        w = df[df.kind == f"{end}_witness"]
        ax.scatter(w.one_minus_p, w.score_norm, marker=m, s=40, color=c, edgecolor="k",
                   zorder=3, label=f"{end} witness")
    ax.set(xlabel=r"$1 - p_k$", ylabel=r"$\|e_k - p\|$", title="S4: score norm wedge")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig, df


def layer_wedge_table(rows=None, names=None, *, vocab_size: int = 64, hidden: int = 128,
                      T: int = 10, n_tokens: int = 4, seed: int = 0) -> pd.DataFrame:
    """One row per (layer, token): ``||grad_a log p_k||``, ``1 - p`` and its own Jacobian wedge.

    ``rows``/``names`` as from :func:`tailtheory.softmax.scores.tiny_lm_wedge` (built with the other
    arguments when omitted). ``vocab_size`` must be the model's vocabulary.
    """
    if rows is None:
        rows, names = sm.tiny_lm_wedge(vocab_size, hidden, T, n_tokens, seed=seed)
    lower, upper = sm.score_norm_bounds(rows["p"], vocab_size)
    idx = rows["layer"].numpy()
    return pd.DataFrame({
        "layer": [names[i] if names else str(i) for i in idx], "t": rows["t"].numpy(),
        "k": rows["k"].numpy(), "p": rows["p"].numpy(), "one_minus_p": (1 - rows["p"]).numpy(),
        "grad_norm": rows["grad_norm"].numpy(), "J_norm": rows["J_norm"].numpy(),
        "J_smin": rows["J_smin"].numpy(), "upper": (rows["J_norm"] * upper).numpy(),
        "lower": (rows["J_smin"] * lower).numpy()})


def plot_layer_wedge(rows=None, names=None, *, vocab_size: int = 64, hidden: int = 128,
                     T: int = 10, n_tokens: int = 4, seed: int = 0):
    """S5: per layer, ``||grad_a log p_k||`` against ``1 - p_k`` with the fitted wedge.

    Each panel: the tokens (dots), each token's own Jacobian bounds (faint ticks), and the fitted
    constants ``c_lo (1-p)`` and ``c_hi (1-p)`` (dashed; smallest/largest ratio). Returns
    ``(fig, df)`` with the per-token table of :func:`layer_wedge_table`.
    """
    import matplotlib.pyplot as plt

    df = layer_wedge_table(rows, names, vocab_size=vocab_size, hidden=hidden, T=T,
                           n_tokens=n_tokens, seed=seed)
    layers = list(dict.fromkeys(df["layer"]))
    fig, axes = plt.subplots(1, len(layers), figsize=(3.3 * len(layers), 3.3), squeeze=False)
    q = np.linspace(0, 1, 101)
    for ax, name in zip(axes[0], layers):
        d = df[(df.layer == name) & (df.one_minus_p > 0)]
        ratio = d.grad_norm / d.one_minus_p
        ax.scatter(d.one_minus_p, d.upper, marker="_", s=20, color="C3", alpha=0.4,
                   label=r"$\|J\|\sqrt{2}(1-p)$")
        ax.scatter(d.one_minus_p, d.lower, marker="_", s=20, color="C0", alpha=0.4,
                   label=r"$\sigma_{min}(J)\sqrt{V/(V-1)}(1-p)$")
        ax.scatter(d.one_minus_p, d.grad_norm, s=8, color="k", label="tokens")
        for c, lab in ((ratio.min(), "c_lo"), (ratio.max(), "c_hi")):
            ax.plot(q, c * q, ls="--", color="0.5", lw=1)
            ax.annotate(f"{lab}={c:.3g}", (1, c), fontsize=7, ha="right", va="bottom")
        ax.set(title=name, xlabel=r"$1 - p_k$")
    axes[0, 0].set_ylabel(r"$\|\nabla_a \log p_k\|$")
    axes[0, 0].legend(fontsize=6, loc="upper left")
    fig.suptitle("S5: activation-gradient wedge per layer (tiny LM, random init)", fontsize=9)
    fig.tight_layout()
    return fig, df
