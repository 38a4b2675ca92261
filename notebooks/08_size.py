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
# # 08 — Does it grow with size?
#
# Every trained-model verdict of the `matched` recipe rests on one size: a 1.64M-parameter
# model (0.59M outside the input embedding and the output head). The papers' models have 1.5B
# to 7B. A NOT-REPRODUCED at one size cannot say whether the effect appears as models grow, so
# here size is an axis of the evidence: the **model-size ladder** is the same pipeline at five
# sizes (`tailtheory ladder list`), and each effect is measured at every built rung and read as a
# trend against `log10` of the non-embedding parameters.
#
# | rung | width x depth | non-embedding parameters |
# |---|---|---|
# | `base` | 128 x 4 | 0.59M (today's `matched` model) |
# | `w192` | 192 x 6 | 2.0M |
# | `w256` | 256 x 8 | 4.7M |
# | `w384` | 384 x 8 | 10.6M |
# | `w448` | 448 x 10 | 18.1M (30.5x the base) |
#
# **A model is a named build.** Build `b` of a rung is corpus-LM seed `b` and warm-start seed
# `b`; the model it gives on a machine is named by its weights (`RUNG.bBUILD-FINGERPRINT`,
# `tailtheory ladder status`), and a build on another instruction set is another model. Every
# row names its model and the machine that measured it.
#
# **The rule, fixed before its rows** (the ledger, `paper_repro.md`): one point per build (its
# mean over 3 probe seeds: the builds are the units), least squares on `log10` parameters with
# `builds - 2` degrees of freedom, the slope's se the larger of the fit's and the probe seeds'
# within-build noise; shares and k3 in `log10`. The 11 trend tests (V8 and Z1-Z10) are one
# family: Holm's method at 5% calls **GROWS** / **SHRINKS**; **FLAT** when the unadjusted 95%
# interval lies inside `+-delta` per decade (an equivalence test); **UNRESOLVED** otherwise. A
# trend needs 3 rungs with 3 builds each (base, `w192`, `w256`); rungs with one build are
# exploratory, shown beside it. Until then a claim is PENDING. The first builds' rows (one build a
# rung, no model named) stay as superseded records under the first rule (rung means, probe seeds
# as the noise), drawn below.
#
# **Caveats.** Size is confounded with training state: the pretraining corpus (the Python
# standard library, ~1M tokens) is repeated up to 6.7 times at the top rung, and each rung's
# held-out perplexity is printed beside the trends. The line to 1B parameters is an
# extrapolation, drawn dashed: nothing says a trend stays linear in `log10` of the size.
#
# Claims followed (their criteria are the ledger rows): L1, L4, L5 (LOPTI, arXiv 2505.12929),
# M7, V2 (TIM, arXiv 2605.14220), P4 (DVP, arXiv 2512.23087); and two questions beyond them:
# V7, does fp16 remove the mismatch bf16 rollouts create (Qi et al., arXiv 2510.26788; bf16's
# unit roundoff is 8x fp16's, so a k3 that scales with its square predicts a ratio of 64), and
# V8, does the batch-shape mismatch of a model's own forward fall or grow with size.

# %% tags=["parameters"]
# Parameters (papermill: `papermill IN.ipynb OUT.ipynb -p PRESET full`). The environment variable
# TAILTHEORY_PRESET, when set, overrides them; the next cell prints when it does.
# PRESET  "quick": read the stored measurements (results/ladder_models.json, ladder_probes.json,
#                  v7_64.json, v7_units.json, v8_models.json; the first builds' records
#                  ladder_effects.json, batch_shape_ladder.json, precision_ladder.json); seconds.
#         "full":  first measure what the store lacks on every named model kept here (minutes
#                  to an hour a model: the `lopti` part is the long one), storing each (model,
#                  part, seed) as it finishes. Building a model is `tailtheory ladder build
#                  --rung NAME --build B`.
PRESET = "quick"

# %%
from tailtheory.core.display import provenance, setup_notebook, show_figure, verdict_report
from tailtheory.core.io import preset

setup_notebook()  # figures inline in Jupyter; elsewhere the Agg backend, figures to files only
PRESET = preset(PRESET)  # $TAILTHEORY_PRESET, when set, overrides the parameters cell (and says so)
PROFILE = {"quick": "quick", "full": "thorough"}[PRESET]

# %%
from tailtheory.ladder import build as ladder
from tailtheory.ladder import effects as size, figure as size_figure
from tailtheory.ladder import probes
from tailtheory.ladder.report import size_report

if PRESET == "full":
    probes.measure_probes()
STORED = provenance("stored", PRESET, "results/ladder_probes.json, results/ladder_effects.json")
print(ladder.table())

# %% [markdown]
# ## The verdicts first
#
# At one size, the base rung's (the registered checks L1, L4, L5, M7, V2, P4), then the size
# axis's claims on named models: V7, V8 and the trends Z1-Z10 over builds (`tailtheory verify
# --only ID` runs each on this preset's profile). After them, what `verify` prints about size:
# the trend family with each build's point, V7 under both rules, the first builds' records
# (superseded) and V6 along the ladder (does GRPO's logit-noise threshold k3* move between the
# base rung and `w256`, 8x its size: study `dose_ladder`; `tailtheory diagnose --params N`
# compares a run's k3 with the threshold of the rung nearest its size).

# %%
verdict_report(["L1", "L4", "L5", "M7", "V2", "P4", "V7", "V8", *[f"Z{i}" for i in range(1, 11)]],
               PROFILE);

# %%
print(size_report())

# %% [markdown]
# ## (1) Each effect against size
#
# One panel per effect: small grey points are seeds, blue the rung's mean with the seeds'
# standard deviation; orange the trend over the rungs once 4 have their seeds, dashed to 1B
# parameters; grey dotted the paper's value or the claim's criterion.
#
# - L1: Spearman of `1 - p` and the parameter-gradient norm of `log pi` (criterion 0.5), and the
#   log-log slope of that norm against `1 - p` (S4 predicts 1).
# - L4 (d) the lowest `pi_old` bin's gradient norm over all tokens' (LOPTI Fig. 1(d): 0.87),
#   (e) how unlike updating all tokens updating only the lowest bin is (claim: below 0.5), (f) how
#   much updating only the highest bin moves (claim: below 0.5).
# - L5: the top bin's rise fraction of AR and of Lopti minus GRPO's (claim: above 0).
# - M7: the bf16 envelope slope of `|Delta|` against `1 - p` (M3 predicts 1); V2: `log10` of bf16's
#   mean `|Delta|` of sampled tokens with `1 - p` in [0.1, 1].
# - P4: the share of the sequence KL min-p removes at mean pruned mass at most 1e-3 (knee: 0.5).
# - V8: the share of tokens the model's own bf16 forward moves by more than 1e-3 between a batch
#   of 1 and a padded batch of 32. V7: the bf16 / fp16 k3 ratio against the float32 trainer and
#   with both sides in the 16-bit dtype (64 predicted; the claim holds inside [32, 128]).

# %%
fig, df_size = size_figure.plot_size()
show_figure(fig, "size_trends", df_size, STORED)
df_size.groupby(["effect", "rung"]).value.agg(["mean", "std", "size"]).round(4)

# %% [markdown]
# ## (2) The real mismatch per bin of `1 - p`, per rung
#
# M7 and V2 on every real rollout path: the mean `|Delta|` of sampled tokens within fixed bins of
# `1 - p` (fixed at every size, so a bin's share of tokens may move while its bounds do not), and
# the mean k3 beside it. Mean k3 falls as a policy sharpens, so it is not the effect. `kv` is a
# float32 decoder against the float32 trainer: its numbers are reduction-order noise, labelled so.

# %%
import pandas as pd

rows = []
for name, parts in size.read().items():
    for seed, x in parts.get("tail", {}).items():
        for path, y in x["paths"].items():
            label = "kv (float32 reduction order)" if path == "kv" else path
            rows.append({"rung": name, "seed": int(seed), "path": label, "k3": y["k3"],
                         **{f"1-p in [{b['lo']:g}, {b['hi']:g})": b["mean_abs"]
                            for b in y["bins"]}})
tail = pd.DataFrame(rows)
tail.groupby(["path", "rung"]).mean(numeric_only=True).drop(columns="seed") if len(tail) else tail

# %% [markdown]
# ## (3) The policies' regime per rung
#
# The share of sampled response tokens per LOPTI `pi_old` bin (LOPTI Fig. 1(a), Qwen2.5-7B on
# K&K: 19.2 / 10.2 / 10.1 / 60.5 %), the mean entropy and the mean response length of each rung's
# warm start (float32 sampler, the `tail` part's prompts); below it, what the lowest bin's
# tokens do at each rung (the `decisive` part: the share of them that decide the answer), where
# measured. These are the first builds' rows (superseded: they name no model).

# %%
rows = [{"rung": name, "seed": int(seed), **{f"bin {b}": f for b, f in
                                             enumerate(x["policy"]["bin_fractions"])},
         "entropy": x["policy"]["entropy"], "length": x["policy"]["length"]}
        for name, parts in size.read().items() for seed, x in parts.get("tail", {}).items()
        if "policy" in x]
pd.DataFrame(rows)

# %%
pd.DataFrame([{"rung": k, **v} for k, v in size.decisive_by_rung().items()],
             columns=["rung", "decisive_share", "token_frac", "seeds"])

# %% [markdown]
# ## (4) Where the lowest bin decides: the `decide` recipe against size
#
# The `matched` recipe's lowest bin holds mostly free synonym and order choices at every rung
# (the table above), so its L1, L4 and L5 trends say nothing about tokens that decide the answer.
# The same probes run on the `decide` recipe (Knights and Knaves with three people, answered by
# naming the truth-tellers: every response token is a choice the reward reads), on its warm start
# at the base size and at `w256`'s width, depth and heads (8x the non-embedding parameters,
# trained from a random init as the base is). Each size has one build, so under the rule over
# builds (the ledger) the two sizes compare two models: EXPLORATORY, whatever the seeds say. The
# first reading took the probe seeds as units and called a direction at 2 se; that reading is
# superseded, and Welch's t on the same seeds calls none of its directions (the ledger's table of
# the first builds). A comparison of sizes needs 3 builds a size and Welch's t on their points.

# %%
fig, df_decide = size_figure.plot_decide()
show_figure(fig, "size_decide", df_decide, STORED)
df_decide.groupby(["effect", "rung"]).value.agg(["mean", "std", "size"]).round(4)
