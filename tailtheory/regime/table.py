"""The regime table: each training claim's quantities on the testbed next to the paper's, with
the ratio and which verdicts to read as regime-limited; ``docs/regime.md`` is generated from it.

Source: the quantities and the rule of :mod:`tailtheory.regime.quantities`.

``python -m tailtheory.regime.table`` rewrites ``docs/regime.md`` from the stored measurements
(nothing is measured; ``tests/regime/test_table.py`` fails when the file differs from
:func:`render`). :func:`regime_frame` is notebook 04's table, :func:`plot_bin_fractions` its
figure (LOPTI Fig. 1(a) against the testbed).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tailtheory.core.io import REPO_ROOT, atomic_write_text
from tailtheory.regime.quantities import (BAND, CLAIMS, DECISIVE_SHARE, LOPTI_FIG1A, NOT_STATED,
                                          QUANTITIES,
                                          in_band, ratio, reading, row_limited)

DOCS = REPO_ROOT / "docs" / "regime.md"

DOC_RECIPES = ("matched", "learn")
"""The recipes of ``docs/regime.md``, one pair of columns each, the one matching the papers'
Fig. 1(a) histogram first."""

POLICY_NAMES = {"warm": "warm start", "mid": "half-way"}


def _verdicts() -> dict:
    from tailtheory.core.registry import all_claims

    claims = all_claims()
    return {c: claims[c].expected for c in CLAIMS}


MEASURED_ON = {claim: "matched" for claim in ("L1", "L2", "L3", "L4", "L5", "L6", "P4", "P5",
                                              "M7")}
"""The recipe each claim's verdict is measured on, where it is not ``learn`` (the ledger's
"Training claims: where they ran"): a claim is read against that recipe's ratios."""


def measured_on(claim: str, recipes) -> str:
    """The recipe of ``recipes`` whose ratios judge ``claim``: its :data:`MEASURED_ON` recipe, or
    ``learn``, or the first of ``recipes`` when that one is not among them."""
    r = MEASURED_ON.get(claim, "learn")
    return r if r in recipes else recipes[0]


def regime_rows(recipes=DOC_RECIPES) -> list[dict]:
    """One row per quantity: claims, quantity, paper value and citation, each recipe's value per
    policy and its ratio to the paper, the "regime-limited?" reading (each claim against the
    recipe its verdict is measured on, :func:`measured_on`), the testbed's sources."""
    from tailtheory.regime.measure import POLICIES
    from tailtheory.regime.sources import regime_values

    if isinstance(recipes, str) or not recipes:
        raise ValueError(f"recipes must be a non-empty sequence of recipe names, got {recipes!r}")

    values = {r: regime_values(r) for r in recipes}
    verdicts = _verdicts()
    rows = []
    for q in QUANTITIES:
        row = {"claims": ", ".join(q.claims), "key": q.key, "quantity": q.label,
               "paper": q.paper, "cite": q.cite}
        ratios, sources = {r: [] for r in recipes}, []
        for r in recipes:
            for p in POLICIES:
                v, src = values[r][p].get(q.key, (None, None))
                row[f"{r} {p}"], row[f"{r} {p} ratio"] = v, ratio(v, q.paper)
                ratios[r].append(row[f"{r} {p} ratio"])
                sources += [src] if src and src not in sources else []
        row["regime-limited?"] = row_limited(
            {c: ratios[measured_on(c, recipes)] for c in q.claims},
            {c: verdicts[c] for c in q.claims})
        row["testbed source"] = ", ".join(sources)
        rows.append(row)
    return rows


def claim_rows(rows: list[dict], recipes=DOC_RECIPES) -> list[dict]:
    """Per claim: its ledger verdict, its quantities within / outside :data:`BAND` (any policy of
    the recipe its verdict is measured on outside counts) and the reading
    (:func:`~tailtheory.regime.quantities.reading`)."""
    verdicts, out = _verdicts(), []
    for c in CLAIMS:
        mine = [r for r in rows if c in r["claims"].split(", ")]
        cols = tuple(f"{measured_on(c, recipes)} {p} ratio" for p in ("warm", "mid"))
        ratios = {r["key"]: [r[k] for k in cols if r.get(k) is not None] for r in mine}
        outside = [k for k, rs in ratios.items() if rs and not all(in_band(x) for x in rs)]
        inside = [k for k, rs in ratios.items() if rs and all(in_band(x) for x in rs)]
        out.append({"claim": c, "verdict": verdicts[c].value,
                    "measured on": measured_on(c, recipes), "within 2x": len(inside),
                    "outside 2x": len(outside),
                    "no paper value": sum(not rs for rs in ratios.values()),
                    "reading": reading(verdicts[c], outside, inside,
                                       any(r["key"] == DECISIVE_SHARE for r in mine))})
    return out


def regime_frame(recipes=DOC_RECIPES):
    """The table as a pandas frame (notebook 04): numbers as they are, a missing paper value as
    :data:`NOT_STATED`, a ratio without one as ``–``."""
    import pandas as pd

    df = pd.DataFrame(regime_rows(recipes)).drop(columns=["key"]).set_index("quantity")
    df["paper"] = [NOT_STATED if x is None or x != x else x for x in df["paper"]]
    for col in [c for c in df if c.endswith(" ratio")]:
        df[col] = ["–" if x is None or x != x else x for x in df[col]]
    return df


NOT_REPORTABLE = "–"
"""The cell of a decisive share below its reporting floor (200 lowest-bin tokens of 40 prompts):
measured, not reported (:func:`tailtheory.lopti.decisive.store.decisive_share` gives NaN)."""


def _num(x, key: str = "") -> str:
    """A value in a cell: ``not measured`` for None or NaN, except the decisive share's NaN
    (``key`` :data:`DECISIVE_SHARE`), which is :data:`NOT_REPORTABLE`."""
    if x is None or x != x:  # None or NaN
        return NOT_REPORTABLE if x is not None and key == DECISIVE_SHARE else "not measured"
    return f"{x:.3g}"


def _ratio(x) -> str:
    return "–" if x is None else f"{x:.2g}"


def markdown_table(rows: list[dict], recipes=DOC_RECIPES) -> str:
    """The rows as a markdown table: claims, quantity, paper (citation), per recipe and policy the
    value and ``x ratio``, regime-limited?, testbed source."""
    from tailtheory.regime.measure import POLICIES

    cols = [(r, p) for r in recipes for p in POLICIES]
    head = (["claims", "quantity", "paper"] + [f"{r} {POLICY_NAMES[p]}" for r, p in cols]
            + [f"ratio {r} {POLICY_NAMES[p]}" for r, p in cols]
            + ["regime-limited?", "testbed source"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        paper = NOT_STATED if row["paper"] is None else f"{row['paper']:.3g} ({row['cite']})"
        cells = ([row["claims"], row["quantity"].replace("|", "\\|"), paper]
                 + [_num(row[f"{r} {p}"], row["key"]) for r, p in cols]
                 + [_ratio(row[f"{r} {p} ratio"]) for r, p in cols]
                 + [row["regime-limited?"], row["testbed source"]])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def claims_markdown(rows: list[dict]) -> str:
    """The per-claim summary (:func:`claim_rows`) as a markdown table."""
    summary = claim_rows(rows)
    head = list(summary[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(s[h]) for h in head) + " |" for s in summary]
    return "\n".join(lines) + "\n"


def probe_beside(recipe: str = "learn") -> list[dict]:
    """Where a stored study gives a number, the regime probe's own value beside it: one row per
    quantity read from a study other than the LOPTI probes (whose batches the probe draws
    again, so its bins equal theirs)."""
    from tailtheory.regime.measure import POLICIES, regime_data
    from tailtheory.regime.sources import probe_values, regime_values

    values, probe_rows = regime_values(recipe), regime_data(recipe)
    probe = {p: probe_values(probe_rows[p]) for p in POLICIES}
    out = []
    for q in QUANTITIES:
        if q.key not in values[POLICIES[0]]:   # not measured on this recipe
            continue
        src = values[POLICIES[0]][q.key][1]
        if src.startswith(("regime_", "recipe", "lopti_probes", "decisive_")):
            continue   # the probe draws these batches again, or does not measure the quantity
        out.append({"quantity": q.label, "stored in": src,
                    **{f"{POLICY_NAMES[p]}: {k}": v for p in POLICIES
                       for k, v in (("stored", values[p][q.key][0]), ("probe", probe[p][q.key]))}})
    return out


def beside_markdown(rows: list[dict]) -> str:
    """:func:`probe_beside` as a markdown table."""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(v if isinstance(v, str) else _num(v) for v in r.values()) + " |"
              for r in rows]
    return "\n".join(lines) + "\n"


HEADER = f"""# The regime of each training claim: testbed against paper

<!-- generated by `python -m tailtheory.regime.table` from the stored measurements in results/;
do not edit by hand -->

Each training and trained-model claim depends on dimensionless quantities of the policy it is
measured on: how many sampled tokens sit at low `pi_old`, how large the advantages there are,
how much mass DVP's safe set prunes, how large the real mismatch `k3` is per token and per
response, how long responses are, how much rewards vary within a group. This table puts each
quantity, measured on the testbed's policies, next to the paper's value and gives the ratio
testbed / paper. A quantity is in the paper's regime when the ratio lies in
[{BAND[0]:g}, {BAND[1]:g}] ("within 2x"); a claim whose ledger verdict is
NOT-REPRODUCED or REFUTED while one of its quantities lies outside is **regime-limited**: the
verdict cannot be told apart from "not in the paper's regime".

- **Testbed values** are computed from stored measurements, never typed in: the `learn` recipe's
  LOPTI probes (`results/lopti_probes_learn.json`), its DVP and mismatch studies
  (`results/dvp_learn.json`, `results/mismatch_learn.json`: their runs at step 0 and step 60,
  5 seeds) and the regime probe (`results/regime_learn.json`, `tailtheory measure regime_learn`:
  3 seeds x 4 batches of 32 x 8 responses from the warm start and from GRPO seed 1 at step 60,
  with bf16 and fp8 rollouts of the same steps).
  "warm start" is the recipe's warm start, "half-way" the policy at step 60 of 120. The
  `matched` recipe (the `learn` testbed written in words drawn from Zipf-weighted synonyms by a
  warm start of a BPE LM pretrained here) takes its column from its regime probe
  (`results/regime_matched.json`, same sizes). It has no mismatch training study; its DVP study
  (`results/dvp_matched.json`: GRPO and DVP at the claimed rho = 1e-4 only, `bf16` rollouts, 120
  steps, 5 seeds each) finds the P2 bound at 0.07-0.15, above 0.05 at every step of every seed,
  while DVP trains no worse (final reward +0.077 over GRPO, se 0.023; held-out accuracy +0.011,
  se 0.030): P5 NOT-REPRODUCED, as on `learn`. Its one rho cannot fill the rows of four rhos, so
  the probe's are shown.
- **Paper values** are the ones the project quotes with their source (`docs/claims.md`,
  `paper_repro.md`). "{NOT_STATED}" means no value the project has read in the paper: the
  papers' figures beyond those quotes were not readable here, so none is guessed.
- Each claim is read against the recipe its verdict is measured on (the column "measured on"
  below): L1-L6, P4, P5 and M7 on `matched`, the others on `learn`. Another recipe is one more
  column by its name (`regime_rows(("matched", "learn"))`, once `tailtheory measure
  regime_NAME` has stored its probe: a recipe of `tailtheory.regime.measure.COSTS`).
- **What "within 2x" covers on `matched`.** Its quantities are the histogram of sampled-token
  probabilities (LOPTI Fig. 1(a): 13.9 / 8.7 / 4.6 / 72.8% of response tokens per `pi_old` bin at
  the warm start, paper 19.2 / 10.2 / 10.1 / 60.5%), beside which its per-bin gradient norms
  follow Fig. 1(d) (0.79 / 0.47 / 0.34 / 0.20 of all tokens' norm, paper 0.87 / 0.44 / 0.28 /
  0.18). They do not cover what the tokens do. `kk_prose` writes each trace word as one of six or
  seven Zipf-weighted synonyms and checks people in any order, and its reward reads only the
  final answer: an exact imitator of those free choices (about 11.6 synonym and 2.5 order slots a
  response) already puts about 8.0 tokens per response in the lowest bin, against 9.0 at the warm
  start and 7.8 half-way, so about 90% of the lowest bin at the warm start is choice the reward
  never reads. The lowest bin's mean signed advantage is close to the top bin's (-0.107 against
  -0.064 at the warm start), while on `learn` the lowest bin is where the errors are (-0.514).
  So "in the paper's regime where compared" for L2, L3 and L6 means the histogram is, not the
  tokens' function: their NOT-REPRODUCED holds where low-probability tokens are reward-blind
  paraphrase; where they decide the answer it is open. What share of a 7B model's
  low-probability tokens decide its answer the paper does not state: the row "called decisive"
  gives the testbed's share (`results/decisive_<recipe>.json`, under the ledger's rule of
  2026-11-29, `paper_repro.md`, "Decisiveness with its noise shown": tokens whose coupled branch
  rollouts move the expected reward by at least tau = 0.060 with two standard errors to spare,
  `tailtheory.lopti.decisive.noise`; blank where a policy has fewer than 200 lowest-bin tokens
  of 40 prompts) against "{NOT_STATED}", and the reading of L1-L6 is "regime unknown: decisive
  share not stated" where no quantity lies outside 2x. On `matched` it is 0.050 [0.028, 0.076]
  of 300 tokens of 90 prompts at the warm start and 0.040 [0.019, 0.063] of 300 tokens of 88
  prompts half-way (excess mean D 0.026 [0.016, 0.039] and 0.023 [0.013, 0.035]); on `learn`
  0.476 [0.397, 0.553] of 290 tokens of 86 prompts at the warm start, not reportable half-way
  (184 tokens of 74 prompts; excess mean D 0.386 [0.324, 0.451]). The `decide` recipe (Knights
  and Knaves answered by naming the truth-tellers; `docs/evidence.md`) is the other end of that
  share: 0.647 [0.572, 0.721] of 295 tokens of 90 prompts at the warm start, its excess mean D
  0.248 [0.211, 0.291], 9.5x `matched`'s; its GRPO does not learn by the rule, so only the
  one-step claims L1, L4 and L5 are measured there (the same verdicts as on `matched`). The same
  holds for L1, L4 and L5, on top of the third bin that marks them regime-limited.

"""


BESIDE = """
## The regime probe beside the stored studies

The DVP and mismatch rows above are read from the studies' own training runs (5 seeds, each
run's policy at step 0 and step 60). The regime probe measures the same quantities on its own
batches (3 seeds x 4 batches from the warm start and from the one half-way policy, GRPO seed 1
on the `exact` path, sampled again on bf16 and fp8): the same code and draws at step 0 (its
batch 0 of seed s on a path is step 0 of that path's run of seed s, tested), other batches and
other policies after. Its LOPTI bins are the LOPTI probes' own batches, token for token
(tested), so they are not repeated here.

"""


def render(recipes=DOC_RECIPES) -> str:
    """The whole of ``docs/regime.md``."""
    rows = regime_rows(recipes)
    return (HEADER + "## Quantities\n\n" + markdown_table(rows, recipes)
            + "\n## Claims: how to read each verdict\n\n" + claims_markdown(rows)
            + BESIDE + beside_markdown(probe_beside(recipes[-1]))
            + "\nPapers: LOPTI arXiv 2505.12929, DVP arXiv 2512.23087, TRM arXiv 2512.23075, "
              "OTB arXiv 2602.07078, TIM arXiv 2605.14220.\n")


def update_docs(path: Path = DOCS) -> bool:
    """Rewrite ``docs/regime.md``; returns whether anything changed."""
    text = render()
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if text != old:
        atomic_write_text(path, text)
    return text != old


def plot_bin_fractions(recipes=DOC_RECIPES):
    """LOPTI Fig. 1(a) against the testbed: the share of sampled response tokens per ``pi_old``
    bin, the paper's and each recipe's per policy, on a log axis (ratios read as distances).
    Returns ``(figure, data)``."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from tailtheory.regime.measure import POLICIES
    from tailtheory.regime.sources import regime_values

    bins = ["[0, .25]", "(.25, .5]", "(.5, .75]", "(.75, 1]"]
    series = {"LOPTI Fig. 1(a), Qwen2.5-7B": list(LOPTI_FIG1A)}
    for r in recipes:
        vals = regime_values(r)
        for p in POLICIES:
            series[f"{r} {POLICY_NAMES[p]}"] = [vals[p][f"lopti/tok_frac_b{b}"][0]
                                                for b in range(4)]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(series)
    for i, (name, ys) in enumerate(series.items()):
        ax.bar(np.arange(4) + (i - (len(series) - 1) / 2) * width, ys, width, label=name)
    for b, y in enumerate(LOPTI_FIG1A):  # the paper's regime: within 2x of its value
        ax.hlines([y * BAND[0], y * BAND[1]], b - 0.45, b + 0.45, colors="k", linestyles="--",
                  linewidth=0.8, label="paper's value / 2 and x 2" if b == 0 else None)
    ax.set_yscale("log")
    ax.set_xticks(range(4), bins)
    ax.set_xlabel("pi_old bin of the sampled response token")
    ax.set_ylabel("share of sampled response tokens")
    ax.set_title("Tokens per pi_old bin: paper against testbed")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    data = pd.DataFrame([{"series": s, "bin": bins[b], "share": ys[b]}
                         for s, ys in series.items() for b in range(4)])
    return fig, data


if __name__ == "__main__":
    print("docs/regime.md", "updated" if update_docs() else "already current")
    sys.exit(0)
