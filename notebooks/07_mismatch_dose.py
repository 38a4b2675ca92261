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
# # 07 — How much mismatch does GRPO survive? A dose-response (claim V6)
#
# TIM (arXiv 2605.14220) compares one mismatched inference engine with none; DVP (arXiv
# 2512.23087) models the mismatch as noise on the logits. Neither sweeps the *size* of the
# mismatch against what training achieves. Here the rollout mismatch is set by hand on the
# learning testbed (the `learn` recipe: GRPO on `kk_trace` with two people, 120 steps, where
# GRPO on the zero-mismatch `exact` path gains more than 0.2 held-out accuracy in every seed),
# with the trainer untouched:
#
# - **logit noise**: the sampler draws from $\mathrm{softmax}(z + \delta)$,
#   $\delta \sim N(0, \sigma^2)$ i.i.d. per logit (Gaussian, DVP's model) and reports that
#   distribution's log-probs;
# - **weight noise**: the inference copy's block weights times $(1 + \sigma\varepsilon)$,
#   $\varepsilon \sim N(0, 1)$ per weight, re-drawn at every sync (quantisation-like).
#
# Held-out accuracy is always sampled noise-free from the trainer's weights, so it measures
# what training did, not the noise at test time. Each run's mismatch is its **measured** mean
# per-token k3, never $\sigma$; the real rollout paths (a separate float32 engine, bf16, fp16, fp8)
# sit on the same axis at their measured k3.
#
# **Rule, fixed before measuring** (`tailtheory.tim.dose`, and the ledger): a point is *harmed*
# when the `exact` runs' final held-out accuracy (mean of the last 2 evaluations) exceeds its own
# by more than 2 standard errors over seeds (at least 3 seeds a point). GRPO's threshold lies
# between the largest k3 of an unharmed point below its first harmed point and that harmed
# point's k3, and counts only when every larger $\sigma$ is harmed too and the rollouts there are still
# well-formed (mean `reward/format` >= 0.5). Remedies (token TIS, MIS, IcePop, TRM, DVP; then
# sequence TIS and geometric rejection, added before their runs) run at one $\sigma$ chosen before
# they ran; a remedy moves the threshold when it is not harmed there.
#
# **Scale.** A 0.72M-parameter model on a toy task. The thresholds are orders of magnitude to
# check a real run against (`tailtheory diagnose` does), not numbers that transfer.
#
# **Notation.**
#
# | term | meaning |
# |---|---|
# | $\rho_t$ | $\pi_\text{train}(y_t) / \pi_\text{roll}(y_t)$, the trainer's probability of a sampled token over the sampler's |
# | k1, k3 | per-token mismatch KL estimates (Schulman's estimators): $k_1 = -\log\rho_t$, $k_3 = \rho_t - 1 - \log\rho_t \ge 0$; a run's k3 is their mean over its response tokens and steps |
# | recompute, bypass | how the PPO ratio's $\pi_\text{old}$ is obtained: a trainer forward (the mismatch stays outside the ratio), or the rollout's own log-probs (it enters the ratio) |
# | TIS | truncated importance sampling: each token's loss weighted by $\min(\rho_t, C)$ (token) or the sequence's $\min(\prod_t \rho_t, C)$ (seq-TIS); TIM, arXiv 2605.14220 |
# | MIS | masked importance sampling: weight $\prod_t\rho_t$ inside a band, 0 outside (TIM) |
# | IcePop | token weight $\rho_t$ inside a band $[0.5, 2]$, 0 outside (TIM) |
# | geometric rejection | a sequence kept only when the geometric mean of its $\rho_t$ lies in a narrow band (TIM) |
# | TRM | trust-region masking: a sequence kept only when its largest token divergence is under a threshold; arXiv 2512.23075 |
# | DVP | the sampler and trainer both restricted to a min-p safe vocabulary; arXiv 2512.23087 |
# | $\sigma$ | the injected noise's scale: logit noise $\delta \sim N(0, \sigma^2)$, or relative weight noise (weights times $1 + \sigma\varepsilon$, $\varepsilon \sim N(0, 1)$) |
# | $q$, $T$ | TRM's per-token violation rate (a token's $k_2 = (\log\rho_t)^2/2$ over the threshold), and a response's length in tokens |

# %% tags=["parameters"]
# Parameters (papermill: `papermill IN.ipynb OUT.ipynb -p PRESET full`). The environment variable
# TAILTHEORY_PRESET, when set, overrides them; the next cell prints when it does.
# PRESET  "quick": read the stored runs (results/mismatch_dose.json); seconds.
#         "full":  train every run of the study the run cache lacks (65 runs of 120 steps, about
#                  5 CPU minutes each on one core of this 2-core machine), storing each arm as
#                  it completes, then read them.
PRESET = "quick"
WORKERS = 2  # training processes run at once (one torch thread each)
DUMP = None  # your run's per-token dumps (a file or folder `tailtheory diagnose` reads): section (2)
             # then places your run on this register

# %%
from tailtheory.core.display import provenance, setup_notebook, show_figure, verdict_report
from tailtheory.core.io import preset, workers

setup_notebook()  # figures inline in Jupyter; elsewhere the Agg backend, figures to files only
PRESET = preset(PRESET)  # $TAILTHEORY_PRESET, when set, overrides the parameters cell (and says so)
WORKERS = workers(WORKERS)  # likewise $TAILTHEORY_WORKERS
PROFILE = {"quick": "quick", "full": "thorough"}[PRESET]

# %%
from tailtheory.experiments.plot import curve_panels
from tailtheory.tim import dose, dose_figures

data = dose.STUDY.data(PROFILE, workers=WORKERS)
STORED = provenance("stored", PRESET, "results/mismatch_dose.json")
print(f"{sum(len(r) for r in data.values())} runs stored in {len(data)} arms "
      f"(screened at seed 1 only: {', '.join(f'{a} {b}' for a, b in dose.SCREENED)})")
v6 = dose.v6_evidence(data)  # the result first; the sections below show where it comes from
print(f"V6: {v6.verdict} — GRPO unharmed up to k3 = {v6.numbers['logit:k3_safe']:.2g}, harmed "
      f"from k3 = {v6.numbers['logit:k3_harm']:.2g} (logit noise σ = "
      f"{v6.numbers['logit:sigma_harm']:g}) and at every larger σ")

# %% [markdown]
# ## The verdicts first
#
# The registered checks (the ones `tailtheory verify --only V4,V5,V6,T14` runs) on this preset's
# profile; V4 and V5 read the real paths of section (4); each training claim carries the no-learning
# regime's recorded verdict beside it as superseded.
#
# The sections below show the evidence each verdict rests on.

# %%
verdict_report(["V4", "V5", "V6", "T14"], PROFILE);

# %% [markdown]
# ## (1) The dose-response
#
# Left: final held-out accuracy against each run's measured k3 (small markers are runs, large
# ones the arm's mean with its standard error; grey: the zero-mismatch runs, mean ± 2 se).
# Right: whether the mismatched rollouts still end in a well-formed answer.

# %%
fig, df_dose = dose_figures.plot_dose(data)
show_figure(fig, "mismatch_dose", df_dose, STORED)
df_dose[["label", "seeds", "k3", "format", "final_eval", "final_eval_se", "gap", "gap_se",
         "harmed"]]

# %% [markdown]
# ## (2) The register
#
# What a user can act on: below which measured k3 no harm was measurable here, from which k3
# GRPO was harmed, which remedy was enough at the harmful dose, and where the real paths sit.

# %%
for line in dose.register_text(data):
    print("-", line)

# %% [markdown]
# With `DUMP` set (parameters cell), your own run on this register: `tailtheory diagnose` reads
# its per-token log-probs (formats in `docs/diagnose.md`), measures its mean per-token k3 and says
# where that sits above; its full report is written beside the dump, in `DUMP-diagnose/`.

# %%
if DUMP is not None:  # its [register] lines place the run; register.json holds the numbers
    from pathlib import Path

    from tailtheory.cli import main as tailtheory_cli

    report = Path(f"{Path(DUMP).resolve()}-diagnose")
    tailtheory_cli(["diagnose", str(DUMP), "--out", str(report), "--quiet"])

# %% [markdown]
# ## (3) The curves: held-out accuracy and the mismatch monitor over training (V5 on the sweep)
#
# Where training is harmed, does the per-step k3 (the monitor TIM proposes) show it? Under logit
# noise k3 is the injected mismatch itself, so it moves with $\sigma$ by construction; what it
# cannot show is whether that much mismatch hurts — the dose-response above answers that.
#
# One colour per arm: the line is the mean over seeds, the band their min–max; the k3 axis is
# linear below 1e-4 and logarithmic above.

# %%
m = dose.STUDY.measurement(data)
shown = m.labels(role="baseline") + m.labels(kind="logit", role="dose")
table = m.curves(series=("eval", "k3"), labels=shown)
fig = curve_panels(table, ("held-out accuracy", "k3"), titles={"k3": "mean per-token k3"},
                   legend_panel=0, legend_title="mean; band: min-max over seeds")
fig.axes[1].set_yscale("symlog", linthresh=1e-4)
fig.axes[1].set_ylim(bottom=0)  # k3 >= 0; exact sits at 0
show_figure(fig, "mismatch_dose_curves", table, STORED)

# %% [markdown]
# ## (4) The real paths on the learning testbed (V4, V5)
#
# The same study's GRPO runs on the real rollout paths — a separate float32 inference engine
# (`kv`), bf16 and fp16 copies, fp8 (e4m3) weights, and fp8 with $\pi_\text{old}$ taken from the rollout
# (bypass) — against the zero-mismatch runs. V4 (does a real path's mismatch alone harm GRPO?)
# and V5 (does k3 stay flat where it harms?) are judged on them with the rules fixed in the
# ledger before they ran; a path with fewer than 3 stored seeds is pending. The `kv` curve's k3
# is float32 rounding alone (the same function computed by another decoder, in another order):
# around 1e-12, and machine-dependent: another CPU's kernels give exactly 0 at some steps and a
# few float32 ulps of a log-prob at others. Drawn as in (3); the k3 axis is linear below 1e-6.

# %%
real = m.labels(role="baseline") + m.labels(role="real")
fig = curve_panels(m.curves(series=("eval", "k3"), labels=real), ("held-out accuracy", "k3"),
                   titles={"k3": "mean per-token k3"}, legend_panel=0,
                   legend_title="mean; band: min-max over seeds")
fig.axes[1].set_yscale("symlog", linthresh=1e-6)
fig.axes[1].set_ylim(bottom=0)
show_figure(fig, "mismatch_dose_real_paths", m.curves(series=("eval", "k3"), labels=real), STORED)
for name, ev in zip(("V4", "V5"), dose.real_path_evidence(data)):
    found = ", ".join(f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}"
                      for k, v in ev.key_items())
    print(f"{name} on the learning testbed: {ev.verdict}: {found}\n    (rule: {ev.note})")

# %% [markdown]
# V4 judges harm on final reward; V6 on final held-out accuracy. The real paths by V6's rule
# (`gap`: `exact` minus the path, with its standard error; `harmed`: gap > 2 se, 3 seeds or more):

# %%
import pandas as pd

real_table = pd.DataFrame([{k: r[k] for k in ("label", "seeds", "k3", "final_eval",
                                              "final_reward", "gap", "gap_se", "harmed")}
                           for r in dose.dose_table(data) if r["role"] == "real"])
real_table.style.format({"k3": "{:.2g}", "final_eval": "{:.3f}", "final_reward": "{:.3f}",
                         "gap": "{:+.3f}", "gap_se": "{:.3f}"}, na_rep="pending")

# %% [markdown]
# ## (5) TRM on the learning testbed (T14)
#
# TRM (arXiv 2512.23075) keeps a sequence only when none of its tokens' divergences exceeds a
# threshold; with a per-token violation rate $q$ a sequence of $T$ tokens survives with
# probability $(1-q)^T$. Two checks, the rule unchanged from the no-learning regime and no new
# runs: (a) that length law on the token dumps of the bf16 / fp8 runs of the V3 study
# (`mismatch_learn`); (b) on the $\sigma$ where the remedies above run (GRPO harmed), does masking
# keep training where GRPO alone does not — TRM against GRPO on final reward, held-out beside it.
#
# The figure, one panel per k2 threshold and one colour per run group: dots are the fraction of
# sequences kept per response-length bin (a larger dot: more sequences in the bin), solid lines
# $(1-q)^T$ with the run's $q$, dashed lines the same with the bin's own $q$.

# %%
from tailtheory.tim import training as paths
from tailtheory.trm import figures as trm_figures
from tailtheory.trm import training as trm_training

law_m = paths.STUDY.data(PROFILE, workers=WORKERS)
fig, df_law = trm_figures.plot_length_acceptance(law_m)
show_figure(fig, "trm_learn_acceptance", df_law,
            provenance("stored", PRESET, "results/mismatch_learn.json"))
t14 = trm_training.t14_evidence(law_m, data)
for key in ("length_law:max_abs_dev", "length_law:bins_checked", "base", "base_harmed",
            "trm_minus_grpo", "trm_minus_grpo_se", "trm_minus_grpo:final_heldout",
            "trm_minus_grpo:final_heldout_se"):
    value = t14.numbers[key]
    print(f"{key:34s} {value:.4g}" if isinstance(value, float) else f"{key:34s} {value}")
