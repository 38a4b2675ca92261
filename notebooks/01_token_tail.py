# ---
# jupyter:
#   execution:
#     timeout: 300
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: execution
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 — The token tail: mismatch, pruning, gradient norms
#
# Claims reproduced (ids of `docs/claims.md`):
#
# - **M3, M7** (DVP, TIM): the real bf16 training–inference mismatch $\lvert\Delta\rvert$ of a tiny
#   transformer lies under the exact bound $\log\big(1 + (1-p)(e^{2\varepsilon}-1)\big)$ and its
#   first-order form $(1-p)(e^{2\varepsilon}-1)$.
# - **M4, M5** (DVP): sampled tokens carry a positive mean $\Delta$ (equal to
#   $\mathrm{KL}(p' \,\Vert\, p)$), concentrated on the tail.
# - **M6** (DVP): the sequence log-ratio drifts with the number of tail tokens.
# - **P4** (DVP): sweeping the min-p ratio $\rho$: pruned mass (the bias bound of P2) against the
#   mismatch left after pruning both sides with the same safe set.
# - **S4, S5** (LOPTI): $\lVert e_k - p\rVert$ lies between $\sqrt{V/(V-1)}\,(1-p_k)$ and
#   $\sqrt{2}\,(1-p_k)$; per layer, activation-gradient norms fall inside the Jacobian wedge.
#
# **Notation.**
#
# | term | meaning |
# |---|---|
# | $z$, $p$ | the trainer's logits and probabilities, $p = \mathrm{softmax}(z)$; in a bound, $p$ is one token's probability |
# | $z + \delta$, $p'$ | the inference engine's logits and probabilities; $\delta$ holds every numerical difference (rounding, kernels, KV cache) |
# | $\Delta$ | a token's log-prob mismatch, $\Delta_k = \log p'_k - \log p_k$ (inference minus trainer) |
# | $\varepsilon$ | the logit mismatch's size: M3 assumes $\max_j \lvert\delta_j - \delta_k\rvert \le 2\varepsilon$ (true when every $\lvert\delta_j\rvert \le \varepsilon$); figure (1) takes $\varepsilon = \max_{j,k} \lvert\delta_j - \delta_k\rvert / 2$ per position |
# | $\sigma$ | the scale of injected Gaussian logit noise, $\delta_j \sim N(0, \sigma^2)$ i.i.d. (sections 2 and 3) |
# | $k$, $p_k$, $e_k$ | the sampled token, its trainer probability and its one-hot vector; $e_k - p$ is the score $\partial \log p_k / \partial z$ |
# | $V$ | the vocabulary size |
# | $\rho$ | the min-p ratio of the safe set: a token is kept when its probability is at least $\rho$ times the largest |
# | $m$ | the pruned mass: the probability outside the safe set |
# | $a$, $J$ | a layer's activations and its Jacobian $J = \partial z / \partial a$, with largest singular value $\lVert J\rVert$ and smallest $\sigma_\text{min}(J)$ (S5) |

# %% tags=["parameters"]
# Parameters (papermill: `papermill IN.ipynb OUT.ipynb -p PRESET full`). The environment variable
# TAILTHEORY_PRESET, when set, overrides them; the next cell prints when it does.
# PRESET  "quick": smaller samples, the claims' quick profile; about 20 s on a 2-core CPU (what
#                  `make test` runs).
#         "full":  larger samples, the claims' thorough profile; tens of minutes (not timed here).
# MODEL   None: the toolkit's own models. A path: a local Hugging Face checkpoint with its
#         tokenizer; sections (1) and (4) then probe it (`tailtheory probe mismatch|pruning
#         --model MODEL`, on standard-library text, 4 x 128 tokens quick, 8 x 512 full); the
#         other sections and the verdict stay on the toolkit's models.
# DEVICE  where the checkpoint's probes run: "auto" (a GPU when there is one), "cpu", "cuda".
PRESET = "quick"
MODEL = None
DEVICE = "auto"

# %%
from tailtheory.core.display import provenance, setup_notebook, show_figure
from tailtheory.core.io import preset

setup_notebook()  # figures inline in Jupyter; elsewhere the Agg backend, figures to files only
PRESET = preset(PRESET)  # $TAILTHEORY_PRESET, when set, overrides the parameters cell (and says so)
SIZE = {"quick": dict(B=8, T=32, n_ctx=4000, B_seq=300, n_s4=1000, T_s5=8),
        "full": dict(B=64, T=64, n_ctx=40_000, B_seq=2000, n_s4=5000, T_s5=32)}[PRESET]
PROFILE = {"quick": "quick", "full": "thorough"}[PRESET]  # the claims profile of the verdict
CLAIMS = ["S4", "S5", "M3", "M4", "M5", "M6", "M7", "P4"]

# %%
from tailtheory.pruning.claims import MASS_NEGLIGIBLE
from tailtheory.core.display import verdict_report
from tailtheory.mismatch.figures import (explore_m3, plot_accumulation, plot_mismatch_vs_p,
                                         plot_selection_bias)
from tailtheory.pruning.figures import plot_pruning_tradeoff
from tailtheory.softmax.figures import plot_layer_wedge, plot_score_norm
from tailtheory.pruning.sweep import P4_VOCAB, pruning_sweep
from tailtheory.mismatch.real import M7_PATHS, m7_model, paired_logits, random_input_ids
from tailtheory.probe.run import show_probe

# %% [markdown]
# ## The verdicts first: the registered checks, theory next to measurement
#
# Each claim's registered check (the one `tailtheory verify` runs) on this preset's profile; the
# verdict must be the one the ledger `paper_repro.md` records.
#
# The sections below show the evidence each verdict rests on.

# %%
verdict_report(CLAIMS, PROFILE);

# %% [markdown]
# The real mismatch source: M7's tiny Qwen2-style LM (random init, lm_head sharpened so that it
# has a low-probability tail), float32 trainer against a bfloat16 copy (and, in figure 1, a float16 copy and KV-cache decoding).
# No noise is injected.

# %%
model = m7_model(P4_VOCAB)
ids = random_input_ids(P4_VOCAB, SIZE["B"], SIZE["T"], seed=0)
pairs = {path: paired_logits(model, ids, path) for path in M7_PATHS}  # (B, T, V) each, float64
z, z_bf16 = pairs["bf16"]

# %% [markdown]
# ## (1) $\lvert\Delta\rvert$ against $p$, with M3's exact and first-order bounds (M3, M7)
#
# One panel per path: the bf16 copy, the fp16 copy, KV-cache decoding. Dots: tokens (every token
# with $p > 0.01$, a random sample of the rest). Black lines: M3's exact bound; red: its
# first-order form; solid at the largest $\varepsilon$ measured, dotted at the median.

# %%
if MODEL is None:
    fig, df_m3 = plot_mismatch_vs_p(pairs)  # bf16 and fp16 copies, KV-cache decoding
    show_figure(fig, "token_tail_mismatch_vs_p", df_m3, provenance("measured", PRESET))
# MODEL: the checkpoint's probe, as `tailtheory probe mismatch --model MODEL` (figure, table)
None if MODEL is None else show_probe("mismatch", MODEL, DEVICE, PRESET)

# %% [markdown]
# ### Explore M3: slide $\varepsilon$ and $p$
# Random logit perturbations $\delta$ with every $\lvert\delta_j\rvert \le \varepsilon$ (dots)
# against M3's exact bound (black), its first-order form (red dashed) and M2's linear
# $2\varepsilon(1-p)$ (blue dotted); the star is the witness $\delta_k = -\varepsilon$,
# $\delta_j = +\varepsilon$ for $j \ne k$, which attains the exact bound. Left: every token at this
# $\varepsilon$; right: the bounds at this $p$ against $\varepsilon$, the square the largest random
# $\lvert\Delta\rvert$ near this $p$. In Jupyter with ipywidgets the sliders redraw it (a fraction
# of a second); elsewhere it is drawn once, at $\varepsilon = 0.05$, $p = 0.5$, and not saved.

# %%
explore_m3()

# %% [markdown]
# ## (2) Mean signed $\Delta$ of sampled tokens by probability bin (M4, M5)
#
# Gaussian logit noise, $\sigma = 0.3$. Dots: the mean $\Delta$ of the tokens the engine samples,
# per bin of the trainer's $p$, with $\pm 2$ standard errors; red line: M5's second-order
# prediction.

# %%
fig, df_sel = plot_selection_bias(sigma=0.3, n_contexts=SIZE["n_ctx"])
show_figure(fig, "token_tail_selection_bias", df_sel, provenance("measured", PRESET))

# %% [markdown]
# ## (3) Cumulative log-ratio along sequences with many vs few tail tokens (M6)
#
# Gaussian logit noise, $\sigma = 0.3$. Lines: the mean over sequences of the cumulative
# $\log \pi_\text{train} / \pi_\text{infer} = -\sum_{t' \le t} \Delta_{t'}$ (the trainer's
# probability of the prefix over the engine's), one colour per group; bands: $\pm 1$ standard
# deviation; dotted: $\pm\sigma\sqrt{t}$, the spread of a zero-mean random walk.

# %%
fig, df_acc = plot_accumulation(sigma=0.3, B=SIZE["B_seq"])
show_figure(fig, "token_tail_accumulation", df_acc, provenance("measured", PRESET))

# %% [markdown]
# ## (4) The pruning trade-off (P4)
# The safe set is the sampler's (min-p on the bf16 logits), applied to both sides. Left, against
# $\rho$: the mean pruned mass $m$ per token (dots) and P2's bound $\sum_t m$ per sequence
# (squares). Right: the fraction of each mismatch measure left after pruning (sequence KL, mean
# and largest $\lvert\Delta\rvert$), against the mean pruned mass; dotted: the negligible mass
# $10^{-3}$; a knee would sit in the lower left.

# %%
if MODEL is None:
    sweep = pruning_sweep(z, z_bf16)
    fig, df_p4 = plot_pruning_tradeoff(sweep, mass_negligible=MASS_NEGLIGIBLE)
    show_figure(fig, "token_tail_pruning_tradeoff", df_p4, provenance("measured", PRESET))
# MODEL: the checkpoint's probe, as `tailtheory probe pruning --model MODEL` (figures, table)
(df_p4[["rho", "mass_mean", "kept_frac", "seq_kl_left", "abs_delta_max_left"]]
 if MODEL is None else show_probe("pruning", MODEL, DEVICE, PRESET))

# %% [markdown]
# ## (5) Score norm against $1 - p$ (S4) and the per-layer wedge (S5)
#
# First figure: dots are sampled tokens; lines the lower bound $\sqrt{V/(V-1)}\,(1-p_k)$ (blue),
# the upper $\sqrt{2}\,(1-p_k)$ (red) and the weaker $\sqrt{2(1-p_k)}$ (red dotted); triangles the
# witnesses that attain each end. Second figure, one panel per layer: black dots are tokens'
# $\lVert\nabla_a \log p_k\rVert$, red and blue ticks each token's own Jacobian bounds
# $\lVert J\rVert\sqrt{2}\,(1-p_k)$ and $\sigma_\text{min}(J)\sqrt{V/(V-1)}\,(1-p_k)$, grey dashed
# lines the fitted $c_\text{lo}(1-p_k)$ and $c_\text{hi}(1-p_k)$.

# %%
fig, df_s4 = plot_score_norm(n=SIZE["n_s4"])
show_figure(fig, "token_tail_score_norm", df_s4, provenance("measured", PRESET))
fig, df_s5 = plot_layer_wedge(T=SIZE["T_s5"])
show_figure(fig, "token_tail_layer_wedge", df_s5, provenance("measured", PRESET))
