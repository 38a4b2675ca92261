"""Figures of the softmax facts (LOPTI Prop. 4.2; claims S4, S5).

Every helper returns ``(fig, df)``: the figure and the data behind it, ready for
``tailtheory.core.io.save_figure(fig, name, data=df)``.
Notebook 01 (``make repro``) writes them into ``figures/``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tailtheory.softmax import scores as sm
from tailtheory.softmax.scores import score_norm_table
from tailtheory.softmax.wedge import layer_wedge_table

WITNESS_P = (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)
"""Probabilities at which the S4 witnesses are drawn."""


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


def plot_layer_wedge(rows=None, names=None, *, vocab_size: int = 64, hidden: int = 128,
                     T: int = 10, n_tokens: int = 4, seed: int = 0):
    """S5: per layer, ``||grad_a log p_k||`` against ``1 - p_k`` with the fitted wedge.

    Each panel: the tokens (dots), each token's own Jacobian bounds (faint ticks), and the fitted
    constants ``c_lo (1-p)`` and ``c_hi (1-p)`` (dashed; smallest/largest ratio). Returns
    ``(fig, df)`` with the per-token table of :func:`tailtheory.softmax.wedge.layer_wedge_table`.
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


__all__ = ["WITNESS_P", "plot_score_norm", "plot_layer_wedge", "score_norm_table",
           "layer_wedge_table"]
