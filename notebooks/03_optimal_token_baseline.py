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
# # 03 — The optimal token baseline (OTB)
#
# Claims reproduced (ids of `docs/claims.md`), all on exact tabular policies:
#
# - **O1**: the per-token energy $w_t = 1 - 2\pi_t + \sum_v \pi_t(v)^2$ is the squared score norm.
# - **O2**: OTB, $B^*_t = \sum_i G^i_t W^i_t / \sum_i W^i_t$, minimises the prefix surrogate
#   $J(B) = \sum_t \mathbb{E}\big[\lVert S_{\le t}\rVert^2 (G_t - B_t)^2 m_t\big]$ — with the proxy
#   $W_t$ only when scores of different positions are orthogonal.
# - **O3**: the variance of $\hat g_B = \sum_t s_t (G_t - B_t)\, m_t$ is minimised by $B = M^{-1}c$,
#   not OTB.
# - **O4**: OTB beats the group-mean baseline, $V(\text{OTB}) / V(\text{mean}) < 1$.
# - **O5**: OTB is a shrunk, energy-weighted RLOO.
# - **O6**: "N = 4 with OTB matches N = 32 without".
#
# **Notation.**
#
# | term | meaning |
# |---|---|
# | $V$, $T$ | the vocabulary size and the horizon (positions per response) |
# | $N$, $i$ | the group size (responses to one prompt) and a response's index in its group |
# | $R$, $G_t$ | the outcome reward and the rewards-to-go ($G_t = R$ at every alive position) |
# | $m_t$ | the alive mask: 1 while the response is still running at position $t$, else 0 |
# | $\pi_t$, $\pi_t(v)$ | the probability of the sampled token at position $t$, and of token $v$ there |
# | $w_t$, $W_t$ | the per-token energy $w_t = 1 - 2\pi_t + \sum_v \pi_t(v)^2$ and the realised energy $W_t = \sum_{j \le t} m_j w_j$ |
# | $s_t$, $S_{\le t}$ | the score $\partial \log \pi(y_t \mid c_t) / \partial\theta$ and the prefix score $S_{\le t} = \sum_{j \le t} s_j$ |
# | $B_t$, $B^*_t$ | a baseline at position $t$, and OTB's $B^*_t = \sum_i G^i_t W^i_t / \sum_i W^i_t$ (the code adds $10^{-8}$ to the denominator) |
# | $\hat g_B$ | the gradient estimate with baseline $B$, $\sum_t s_t (G_t - B_t)\, m_t$ |
# | $M$, $c$ | $M_{tu} = \mathbb{E}[\langle s_t, s_u\rangle\, m_t m_u]$ and $c_t = \mathbb{E}[\langle s_t, \sum_u s_u G_u\rangle\, m_t]$; $B = M^{-1}c$ is the variance-optimal baseline |
# | $V(B)$ | the variance of $\hat g_B$ over one response (not the vocabulary size $V$) |

# %% tags=["parameters"]
# Parameters (papermill: `papermill IN.ipynb OUT.ipynb -p PRESET full`). The environment variable
# TAILTHEORY_PRESET, when set, overrides them; the next cell prints when it does.
# PRESET  "quick": smaller sweeps and Monte Carlo, the claims' quick profile; about 10 s on a
#                  2-core CPU.
#         "full":  the claims' thorough profile; tens of minutes (not timed here).
PRESET = "quick"

# %%
from tailtheory.core.display import provenance, setup_notebook, show_figure
from tailtheory.core.io import preset

setup_notebook()  # figures inline in Jupyter; elsewhere the Agg backend, figures to files only
PRESET = preset(PRESET)  # $TAILTHEORY_PRESET, when set, overrides the parameters cell (and says so)
PROFILE = {"quick": "quick", "full": "thorough"}[PRESET]  # the claims profile of the verdict
CLAIMS = ["O1", "O2", "O3", "O4", "O5", "O6"]

# %%
import pandas as pd

from tailtheory.otb.variance import matching_group_size
from tailtheory.core.display import verdict_report
from tailtheory.otb.experiments import group_table, variance_table
from tailtheory.otb.figures import (explore_otb, plot_baseline_variance, plot_group_study,
                                    plot_proxy_vs_true)

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
# ## (1) Exact variance of each position baseline, relative to the optimum $M^{-1}c$ (O3, O4)
#
# Random tabular policies ($V = 3$, $T = 2, \dots, 5$, binary rewards), with and without an EOS
# token. One panel per EOS setting; for each baseline (one colour), the median of
# $V(B) / V(M^{-1}c)$ over seeds and horizons against the logit sharpness (dots), with its
# min–max band. A ratio of 1 is the optimum.

# %%
sweep = variance_table(PROFILE)
fig, df_var = plot_baseline_variance(sweep)
show_figure(fig, "otb_baseline_variance", df_var, provenance("measured", PRESET))
df_var.groupby(["eos", "baseline"])["V_over_Vopt"].describe()[["min", "50%", "max"]]

# %% [markdown]
# ## (2) The proxy $W_t$ against the true prefix norm $\lVert S_{\le t}\rVert^2$ (O2)
#
# Tabular policy: on the diagonal. The same policy with one logit bias shared by all contexts:
# cross-position terms appear and the proxy falls short. Dots: the alive positions of one policy,
# one colour per parametrisation; dashed: the diagonal $\lVert S_{\le t}\rVert^2 = W_t$.

# %%
fig, df_proxy = plot_proxy_vs_true()
show_figure(fig, "otb_proxy_vs_true_prefix_norm", df_proxy, provenance("measured", PRESET))
gap = df_proxy.true_prefix_sq_norm - df_proxy.W_proxy
gap.groupby(df_proxy.parameters).agg(["min", "max"])

# %% [markdown]
# ## (3) Finite groups: cosine and relative MSE against the exact gradient (O6)
#
# One colour per method, against the group size $N$. Left: the mean cosine between the group's
# gradient estimate $\hat g$ and the exact gradient $g$, with $\pm 2$ standard errors; dotted:
# GRPO's cosine at $N = 32$. Right: the relative MSE
# $\mathbb{E}\lVert \hat g - g\rVert^2 / \lVert g\rVert^2$.

# %%
groups = group_table(PROFILE)
fig, df_groups = plot_group_study(groups)
show_figure(fig, "otb_finite_groups", df_groups, provenance("measured", PRESET))
pd.DataFrame({
    "N reaching GRPO N=32 cosine": matching_group_size(groups, "cosine", ("grpo", 32)),
    "N reaching RLOO N=32 rel. MSE": matching_group_size(groups, "rel_mse", ("rloo", 32))})

# %% [markdown]
# ### Explore: slide the group size
# One tabular policy ($V = 3$, $T = 4$, EOS token 0, binary rewards; the slider `sharpness` sets
# its logits' scale). Lines: the exact variance of a gradient estimate over $N$ samples with a
# fixed baseline, $V(B)/N$, for the group mean, OTB and the optimum $M^{-1}c$ (O3, O4); dots (an
# open square for RLOO): the relative MSE of 200 sampled groups of $N$ with the group mean, RLOO
# and OTB computed inside each group (O6); dotted vertical line: the chosen $N$. In Jupyter with
# ipywidgets the sliders redraw it (a fraction of a second); elsewhere it is drawn once, at
# $N = 8$, `sharpness = 2`, and not saved.

# %%
explore_otb()
