"""What ``tailtheory verify`` and ``tailtheory ladder status`` print about model size.

First the rules over named models (the trend family over builds, decided by Holm's method:
:mod:`tailtheory.ladder.probes`; V7 under both of its rules: :mod:`tailtheory.ladder.mismatch`),
then the first builds' records under the first rules (superseded: their rows name no model),
then the facts measured per rung (the decisive share, the step's speed) and V6 along the ladder.
"""

from __future__ import annotations

from tailtheory.ladder import probes
from tailtheory.ladder.decide import TWO_SIZES, decide_table
from tailtheory.ladder.dose import V6_RUNGS, stored_transfer
from tailtheory.ladder.effects import (EFFECTS, by_rung, decisive_by_rung, part_seconds, read,
                                       trend_table)
from tailtheory.ladder.mismatch import v7_models, v7_units, v7_verdict, v8_trend
from tailtheory.tim.precision_training import stored_v7_training


def size_report(costs: bool = False) -> str:
    """What ``verify`` prints after its table (stored measurements only: each effect's trend,
    V8's, V7's and V6's verdicts); with ``costs`` (``ladder status``) :func:`part_seconds` too."""
    v8, v7, v7t, v6 = v8_trend(), v7_verdict(), stored_v7_training(), stored_transfer()
    v7m, units = v7_models("v7_64"), v7_units()
    cells8 = ", ".join(f"{x['rung']} {x['value']:.4f}" for x in v8["rungs"]) or "none"
    cells7 = "; ".join(f"{x['rung']} {x['verdict']} (" + ", ".join(
        f"{k} {r:.0f} [{a:.0f}, {b:.0f}]" for k, (r, a, b) in x["intervals"].items()) + ")"
        for x in v7["rungs"]) or "none"
    slope8 = (f"; slope {v8['slope']:+.3g} per decade ({v8['low']:+.3g} to {v8['high']:+.3g})"
              if "slope" in v8 else "")
    return ("Against model size, on named models (results/ladder_models.json, ladder_probes.json, "
            "v8_models.json, v7_64.json, v7_units.json; rules in paper_repro.md):\n"
            + probes.table(probes.main_machine())
            + "\nV7 with builds as units (256 prompts; per machine): " + ("; ".join(
                f"{m}: {u['verdict']} (" + ", ".join(f"{k} {v}" for k, v in u["models"].items())
                + ")" for m, u in units.items()) or "none measured (tailtheory measure v7_units)")
            + "\n\nSuperseded (the first builds, whose rows name no model; the first rules):\n"
            + trend_table()
            + f"\nL1, L4, L5 on the decide recipe ({' against '.join(TWO_SIZES)}, seeds the "
              "units; the trend over 4 rungs beside):\n" + decide_table(read(), EFFECTS)
            + "\nDecisive share of the lowest bin (a regime fact, no verdict): " + (", ".join(
                f"{k} {v['decisive_share']:.2f} ({v['seeds']} seeds)"
                for k, v in decisive_by_rung().items()) or "not measured (tailtheory ladder "
                                                            "effects --part decisive)")
            + "\nGRPO step (matched, one thread): " + (", ".join(
                f"{k} {v['tokens_per_s']:,.0f} response tokens/s, update at "
                f"{100 * v['update_peak_share']:.0f}% of the matmul peak" for k, v in by_rung(
                    "step", ("tokens_per_s", "update_peak_share")).items()) or "not measured "
                "(tailtheory ladder effects --part step)")
            + f"\nV8 (hf bf16 batch 32, |Delta| > 1e-3) {v8['verdict']}{slope8}: {cells8}"
            + f"\nV7 (bf16 / fp16 k3 ratio in [32, 128]) on the named models, 64 prompts: "
              f"{v7m['verdict']}: " + ("; ".join(
                  f"{x['model']} {x['verdict']} (" + ", ".join(
                      f"{k} {r:.1f} [{a:.1f}, {b:.1f}]" for k, (r, a, b)
                      in x["intervals"].items()) + f"; {x['machine']})" for x in v7m["models"])
                  or "none measured (tailtheory measure v7_64)")
            + f"\nV7 on the first builds (superseded: their rows name no model) {v7['verdict']}: "
              f"{cells7}"
            + f"\nV7 in training (fp16 uncorrected against bf16 with TIS and with MIS, margin "
              f"0.03, matched recipe): {v7t['verdict']}" + "".join(
                f"; {k} {v:+.3f}" for k, v in v7t.items() if k.startswith("fp16 - ")
                and not k.endswith("se"))
            + f"\nV6 along the ladder (k3* at {' and '.join(V6_RUNGS)}, matched recipe): "
              f"{v6['verdict']}" + "".join(f"; {k} threshold in [{a:.3g}, {b:.3g}]"
                                           for k, (a, b) in v6["intervals"].items())
            + ("\n" + part_seconds() if costs else ""))
