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
# # 02 — Trust regions over long horizons (TRM)
#
# Claims reproduced (ids of `docs/claims.md`):
#
# - **T1–T8** (TRM): the surrogate error
#   $\text{Error} = J(\pi_\theta) - J(\pi_\text{roll}) - L'(\pi_\theta)$ is bounded by the classical
#   $2T(T-1)\varepsilon^2$, the Pinsker-marginal, Mixed, Coupling, Adaptive and Unified bounds.
#   Checked by exact enumeration of tabular policies, with the reward in $[0, 1]$ that maximises
#   $\lvert\text{Error}\rvert$ for each pair.
# - **T10** (derived): every bound still holds halved — and the halved bounds are attained.
# - **T12** (TRM): masking whole sequences by $\max_t D_\text{KL}(c_t) \le \delta_\text{max}$ keeps
#   a sequence with probability $(1-q)^T$: long sequences are dropped more often.
# - **T13** (TRM): the exact $\lvert\text{Error}\rvert$ grows with $T$, with a smaller exponent than
#   the bounds'.
#
# **Notation.**
#
# | term | meaning |
# |---|---|
# | $x$, $y$, $c_t$ | a prompt, a response $y = (y_1, \dots, y_T)$, and the context $c_t = (x, y_{<t})$ of its token $y_t$ |
# | $T$ | the horizon: the number of tokens in a response |
# | $\pi_\text{roll}$, $\pi_\theta$ | the policy that sampled the rollouts and the policy being trained; both tabular here (one logit row per context) |
# | $R$, $J(\pi)$ | the reward, in $[0, 1]$, and the expected reward $J(\pi) = \mathbb{E}_{y \sim \pi}[R]$ |
# | $\rho_t$ | $\pi_\theta(y_t \mid c_t) / \pi_\text{roll}(y_t \mid c_t)$, the ratio of a sampled token's probabilities |
# | $L'$, Error | the surrogate $L' = \mathbb{E}_\text{roll}[R \sum_t (\rho_t - 1)]$ and its error $\text{Error} = J(\pi_\theta) - J(\pi_\text{roll}) - L'$ |
# | $D_\text{TV}(c)$, $D_\text{KL}(c)$ | the divergences of the two policies' next-token distributions at a context $c$, rollout against train: $D_\text{KL}(c) = \mathrm{KL}(\pi_\text{roll}(\cdot \mid c) \,\Vert\, \pi_\theta(\cdot \mid c))$ |
# | $\varepsilon$, $\delta$ | the largest $D_\text{TV}$ and the largest $D_\text{KL}$ over the contexts $\pi_\text{roll}$ reaches |
# | $D^\text{seq}_\text{KL}$ | the sequence-level KL, $\sum_t \mathbb{E}_{c_t}[D_\text{KL}(c_t)]$ |
# | $\delta_\text{max}$, $q$ | TRM's threshold on a token's divergence, and the per-token rate at which it is exceeded |
# | $V$ | the vocabulary size ($V = 2$ in section (2) and the explorer) |

# %% tags=["parameters"]
# Parameters (papermill: `papermill IN.ipynb OUT.ipynb -p PRESET full`). The environment variable
# TAILTHEORY_PRESET, when set, overrides them; the next cell prints when it does.
# PRESET  "quick": 3 seeds, T up to 12, the claims' quick profile; about 10 s on a 2-core CPU.
#         "full":  10 seeds, T up to 14, the claims' thorough profile; tens of minutes (not timed).
PRESET = "quick"

# %%
from tailtheory.core.display import provenance, setup_notebook, show_figure
from tailtheory.core.io import preset

setup_notebook()  # figures inline in Jupyter; elsewhere the Agg backend, figures to files only
PRESET = preset(PRESET)  # $TAILTHEORY_PRESET, when set, overrides the parameters cell (and says so)
SIZE = {"quick": dict(seeds=3, T_max=12, B=4000),
        "full": dict(seeds=10, T_max=14, B=40_000)}[PRESET]
PROFILE = {"quick": "quick", "full": "thorough"}[PRESET]  # the claims profile of the verdict
CLAIMS = [f"T{i}" for i in range(1, 14)]

# %%
from tailtheory.trm import experiments as tx
from tailtheory.core.display import verdict_report
from tailtheory.trm.figures import (explore_trm, plot_acceptance, plot_bounds_vs_T,
                                    plot_error_vs_bounds)

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
# ## (1) The bounds against $T$ in two regimes
# A small per-step KL everywhere (dense) against a large KL at rare contexts (sparse): the
# Pinsker-marginal bound wins the first, the Mixed bound the second. Left: $\delta = 10^{-3}$ at
# every step; right: $\delta = 0.5$ at rare contexts, $D^\text{seq}_\text{KL} = 10^{-3}$ per step.
# One line per bound, log-log: T1 black, T2 and T3 blue, T4 and T5 green, T6 purple, T7 orange
# (solid: the KL form; dotted: the TV form), T8 red dashed.

# %%
fig, df_bounds = plot_bounds_vs_T()
show_figure(fig, "trust_region_bounds_vs_T", df_bounds, provenance("measured", PRESET))
df_bounds[df_bounds["T"] == 1000].pivot(index="bound", columns="regime", values="value")

# %% [markdown]
# ## (2) Exact $\lvert\text{Error}\rvert$ against every bound as $T$ grows
# One logit pair shared by all contexts of a $V = 2$ tree (fixed per-step divergence), the
# worst-case reward for each $T$. Black dots: the exact $\lvert\text{Error}\rvert$ (mean over
# seeds); lines: the bounds, coloured as in (1); red dotted: T8 halved (T10).

# %%
df_T = tx.error_vs_T(range(2, SIZE["T_max"] + 1), scale=0.3, seeds=range(SIZE["seeds"]),
                     stationary=True)
fig, df_T_mean = plot_error_vs_bounds(df_T)
show_figure(fig, "trust_region_error_vs_T", df_T_mean, provenance("measured", PRESET))
fit = df_T_mean["T"] >= 4
exponents = {k: tx.growth_exponent(df_T_mean["T"][fit], df_T_mean[c][fit]) for k, c in
             [("|Error|", "abs_error"), ("classical", "bound/classical"),
              ("pm_kl", "bound/pm_kl"), ("mix_kl", "bound/mix_kl"), ("adaptive", "bound/adaptive")]}
exponents

# %% [markdown]
# ### Explore: slide $T$ and $\delta$
# One $V = 2$ pair: $\pi_\text{roll}$ uniform, $\pi_\theta$ the same two logits in every context,
# so that $\mathrm{KL}(\pi_\text{roll} \,\Vert\, \pi_\theta) = \delta$ everywhere. Left: the exact
# $\lvert\text{Error}\rvert$ (worst-case reward, by enumeration; black dots) and every bound
# (lines, coloured as in (1)) from $T = 2$ to the chosen $T$; right: their values at $T$ (bars).
# In Jupyter with ipywidgets the sliders redraw it (a fraction of a second); elsewhere it is drawn
# once, at $T = 8$, $\delta = 0.01$, and not saved.

# %%
explore_trm()

# %% [markdown]
# ## (3) Every bound on random tabular pairs (dense and sparse)

# %%
df_pairs = tx.sweep_table(PROFILE)  # the table the T1-T8 and T10 checks read
slack = tx.slack_table(df_pairs).merge(tx.slack_table(df_pairs, "half"), on="bound",
                                       suffixes=("", "_halved"))
slack[["bound", "violations", "max_ratio", "violations_halved", "max_ratio_halved",
       "share_min", "share_min_T2_T6"]]

# %% [markdown]
# ## (4) TRM's acceptance rate against $T$ (T12)
#
# Lines: $(1-q)^T$ for three per-token violation rates $q$; dots of the same colour: the
# acceptance rate of simulated sequences.

# %%
fig, df_acc = plot_acceptance(B=SIZE["B"])
show_figure(fig, "trust_region_acceptance", df_acc, provenance("measured", PRESET))
