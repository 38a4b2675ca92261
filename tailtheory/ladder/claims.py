"""The size axis's registered claims: V7 and V8 on named models, and the trends Z1-Z10.

Each check reads stored rows only (``results/v7_64.json``, ``results/v7_units.json``,
``results/ladder_probes.json``, ``results/v8_models.json``; the commands that measure them are
``tailtheory measure NAME``) and decides by the rules the ledger wrote before the rows:

- **V7**: the first rule (``v7_64``: 64 prompts, one bootstrap; REFUTED by one refuted model)
  decides until the rule with builds as units (``v7_units``) reaches a verdict on some machine;
  then the machines' verdicts decide (REFUTED when one refutes, HOLDS when all hold), the first
  rule's shown beside. A verdict never pools machines.
- **V8** and **Z1-Z10**: the trend family of :mod:`tailtheory.ladder.probes` (one point per
  build, Holm's method over the 11 tests listed), on the machine that measured the most rows
  (:func:`~tailtheory.ladder.probes.main_machine`): the verdict does not depend on the machine
  that runs the check. The first rule's verdict over the first builds (whose rows name no model)
  is shown beside as a superseded record.

:func:`ledger_rows` renders each claim's row of the ledger's and the README's tables from the
same evidence (``python -m tailtheory.docs`` writes them; a test fails when a page is stale).
"""

from __future__ import annotations

import numpy as np

from tailtheory.core.registry import Evidence, Verdict, register
from tailtheory.ladder import probes
from tailtheory.ladder.effects import trends as first_trends
from tailtheory.ladder.mismatch import v7_models, v7_units, v7_verdict, v8_trend

Z_CLAIMS = {
    "Z1": ("L1 Spearman", "LOPTI", "L1's Spearman correlation of 1 - p with the parameter-gradient "
           "norm"),
    "Z2": ("L1 slope", "LOPTI", "L1's log-log slope of the gradient norm against 1 - p"),
    "Z3": ("L4 (d)", "LOPTI", "L4 (d): the lowest bin's share of the gradient norm"),
    "Z4": ("L4 (e)", "LOPTI", "L4 (e): |v_low - v_all| / |v_all|"),
    "Z5": ("L4 (f)", "LOPTI", "L4 (f): |v_high| / |v_all|"),
    "Z6": ("L5 AR", "LOPTI", "L5: AR's top-bin rise fraction minus GRPO's"),
    "Z7": ("L5 Lopti", "LOPTI", "L5: Lopti's top-bin rise fraction minus GRPO's"),
    "Z8": ("M7 slope", "DVP", "M7: the bf16 envelope slope of mean |Delta| against 1 - p"),
    "Z9": ("V2 low-p", "TIM", "V2: log10 of bf16's mean |Delta| of tokens with 1 - p in [0.1, 1]"),
    "Z10": ("P4 removed", "DVP", "P4: the share of the sequence KL min-p removes at pruned mass "
            "<= 1e-3 (in log10)"),
}
"""Claim id -> (effect of :data:`~tailtheory.ladder.probes.FAMILY`, paper, quantity)."""

TREND_STATEMENT = (" against model size, on the matched recipe's named models: its trend over "
                   "builds (3 rungs x 3 builds at least), decided by Holm's method over the "
                   "family of 11 trend tests")


def _verdict(text: str) -> Verdict:
    """A verdict string of the ladder's rules (``PENDING (...)``, ``NOT JUDGED (...)``) as a
    :class:`Verdict`: what is missing goes to the numbers, not the verdict."""
    head = text.split(" (")[0]
    return Verdict.PENDING if head in ("PENDING", "NOT JUDGED") else Verdict(head)


def _interval(r: float, a: float, b: float) -> str:
    return f"{r:.1f} [{a:.1f}, {b:.1f}]"


def v7_evidence() -> Evidence:
    """V7's evidence (module docstring)."""
    first, units = v7_models("v7_64"), v7_units()
    decided = {m: u["verdict"] for m, u in units.items() if not u["verdict"].startswith("PENDING")}
    numbers: dict = {}
    if decided:
        vs = set(decided.values())
        verdict = (Verdict.REFUTED if "REFUTED" in vs else Verdict.HOLDS if vs == {"HOLDS"}
                   else Verdict.NOT_REPRODUCED)
        numbers["deciding rule"] = "builds as units (v7_units)"
    else:
        verdict = _verdict(first["verdict"])
        numbers["deciding rule"] = "first rule (v7_64), while v7_units is pending"
    numbers["v7_64 verdict"] = first["verdict"]
    for x in first["models"]:
        for setting, iv in x["intervals"].items():
            numbers[f"v7_64 {x['model']} {setting}"] = _interval(*iv)
    for where, u in units.items():
        numbers[f"v7_units on {where}"] = u["verdict"]
        for model, v in u["models"].items():
            numbers[f"v7_units {model}"] = v
    numbers["first builds (superseded, no model named)"] = v7_verdict()["verdict"]
    key = ("deciding rule", "v7_64 verdict", *[k for k in numbers if k.startswith("v7_units on")])
    return Evidence(verdict, numbers, "per named model and machine; on a CPU the same-dtype "
                    "setting compares two CPU kernels, not the GPU kernels of the paper", key)


def trend_evidence(effect: str, superseded: str | None) -> Evidence:
    """The evidence of one effect of the trend family on the main machine: verdict, slope with
    its unadjusted interval, Holm's adjusted p, the builds' points; ``superseded``: the first
    rule's verdict over the first builds."""
    on = probes.main_machine()
    fam = probes.family(on)
    r = fam["effects"][effect]
    numbers: dict = {"machine": on or "none measured", "verdict": r["verdict"],
                     "builds at rungs with 3 builds":
                         len(r["builds"]) - len(r["exploratory"])}
    t, h = r.get("trend"), r.get("holm")
    if t is not None and h is not None:
        numbers.update({"slope per decade": t.slope, "interval low": t.low, "interval high": t.high,
                        "se from": t.se_source, "Holm p": h.p_adjusted, "raw p": t.p,
                        "delta per decade": t.delta, "log10": str(t.log),
                        "lack of fit p": t.lack_of_fit.p if t.lack_of_fit else "none"})
    for p in r["builds"]:
        tag = " (exploratory)" if p in r["exploratory"] else ""
        numbers[f"{p['label']}{tag}"] = float(np.mean(p["values"]))
        if effect == "V8 share":
            entry = probes.read(probes.V8_STORE).get(p["label"], {})
            k, n = probes.v8_count(entry) or (0, 0)
            if n:
                lo, hi = probes.share_interval(k, n)
                numbers[f"{p['label']}{tag}"] = (f"{k} of {n} tokens, 95% interval {lo:.2g} to "
                                                 f"{hi:.2g}")
    if superseded is not None:
        numbers["first builds (superseded, no model named)"] = superseded
    key = tuple(k for k in ("verdict", "slope per decade", "Holm p",
                            "builds at rungs with 3 builds") if k in numbers)
    return Evidence(_verdict(r["verdict"]), numbers, "", key)


def _first(effect: str) -> str | None:
    verdict = first_trends().get(effect, {}).get("verdict")
    return None if verdict is None else verdict.split(" (")[0]


@register("V7", paper="ours", statement="fp16 rollouts remove most of the mismatch bf16 rollouts "
          "create: the bf16 / fp16 ratio of mean per-token k3 lies in [32, 128] (64 predicted), "
          "per named model and machine", expected=Verdict.NOT_REPRODUCED)
def _v7(profile: str) -> Evidence:
    return v7_evidence()


@register("V8", paper="ours", statement="the share of tokens whose log-probability moves by more "
          "than 1e-3 between a sequence scored alone and in a padded batch (hf bf16, batch 32)"
          + TREND_STATEMENT, expected=Verdict.PENDING)
def _v8(profile: str) -> Evidence:
    return trend_evidence("V8 share", v8_trend()["verdict"].split(" (")[0])


Z_EXPECTED = {"Z1": Verdict.UNRESOLVED, "Z2": Verdict.FLAT, "Z3": Verdict.UNRESOLVED,
              "Z4": Verdict.UNRESOLVED, "Z5": Verdict.UNRESOLVED, "Z6": Verdict.UNRESOLVED,
              "Z7": Verdict.FLAT, "Z8": Verdict.UNRESOLVED, "Z9": Verdict.FLAT,
              "Z10": Verdict.UNRESOLVED}
"""Each size claim's verdict as the ledger records it: over the 9 named builds (three rungs of
three builds each, AMD EPYC with AVX512), Holm's method over the family of trend tests."""


def _z(claim_id: str):
    effect, paper, what = Z_CLAIMS[claim_id]

    def check(profile: str) -> Evidence:
        return trend_evidence(effect, _first(effect))

    check.__name__ = check.__qualname__ = f"_{claim_id.lower()}"
    register(claim_id, paper=paper, statement=what + TREND_STATEMENT,
             expected=Z_EXPECTED[claim_id])(check)
    return check


_z1, _z2, _z3, _z4, _z5, _z6, _z7, _z8, _z9, _z10 = (_z(f"Z{i}") for i in range(1, 11))
