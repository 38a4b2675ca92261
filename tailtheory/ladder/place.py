"""The run's mean k3 beside GRPO's threshold at the nearest rung of the model-size ladder (V6
along the ladder, :mod:`tailtheory.ladder.dose`).

The register of :mod:`tailtheory.diagnose.sections.register` was measured on the ``learn`` recipe's 0.7M
model. The ladder measures the same threshold on the ``matched`` recipe at rungs of growing
size (:data:`tailtheory.ladder.dose.V6_RUNGS`), each in ``[k3_safe, k3_harm]``. A run is
compared with the rung nearest its model in log parameters (``--params``); without one, with the
largest rung, the nearest to any model larger than the ladder. Only a measured threshold is
named: a rung whose runs are missing, or that has no threshold, is said so.
"""

from __future__ import annotations

import math

from tailtheory.engine.start.rungs import params, rung
from tailtheory.ladder.dose import V6_RUNGS, stored_transfer

PLACEMENTS = {
    "below_safe": "at or below the rung's k3_safe: no harm measured there",
    "between": "inside the rung's threshold interval [k3_safe, k3_harm]",
    "at_or_above_harm": "at or above the rung's k3_harm: GRPO was harmed there",
    "no_threshold": "the rung has no measured threshold",
}
"""Each value of :func:`ladder_placement`'s ``placement`` and what it means."""


def rung_sizes() -> dict[str, int]:
    """Rung -> its parameters, for the rungs of V6 along the ladder."""
    return {name: params(rung(name).model) for name in V6_RUNGS}


def nearest_rung(n_params: float | None, sizes: dict[str, int]) -> str:
    """The rung of ``sizes`` nearest ``n_params`` in log parameters (ties: the larger); ``None``:
    the largest rung. A non-positive or non-finite count is a ``ValueError``."""
    if n_params is None:
        return max(sizes, key=sizes.get)
    if isinstance(n_params, bool) or not (math.isfinite(n_params) and n_params > 0):
        raise ValueError(f"--params must be a positive number of parameters, got {n_params!r}")
    return min(sizes, key=lambda k: (abs(math.log(n_params / sizes[k])), -sizes[k]))


def ladder_placement(mean_k3: float, n_params: float | None = None,
                     transfer: dict | None = None, sizes: dict[str, int] | None = None) -> dict:
    """Where ``mean_k3`` sits against GRPO's threshold at the rung nearest ``n_params``.

    ``transfer``: :func:`tailtheory.ladder.dose.stored_transfer`'s dict (``None`` reads
    it); ``sizes``: rung -> parameters (default :func:`rung_sizes`). Returns ``rung``,
    ``rung_params``, ``params`` (the run's, or None), ``chosen_by`` (``params`` or ``largest``),
    ``interval`` (the rung's ``(low, high)`` or None), ``placement`` (a key of
    :data:`PLACEMENTS`) and ``reason`` (the study's state when the rung has no threshold)."""
    sizes = sizes or rung_sizes()
    name = nearest_rung(n_params, sizes)
    if transfer is None:
        transfer = stored_transfer()
    out = {"rung": name, "rung_params": sizes[name], "params": n_params,
           "chosen_by": "largest" if n_params is None else "params", "interval": None,
           "placement": "no_threshold", "reason": ""}
    interval = transfer.get("intervals", {}).get(name)
    if interval is None:
        return {**out, "reason": f"V6 along the ladder is {transfer.get('verdict', 'PENDING')}"}
    low, high = interval
    out["interval"] = (low, high)
    out["placement"] = ("at_or_above_harm" if mean_k3 >= high else
                        "below_safe" if mean_k3 <= low else "between")
    return out


def ladder_lines(lp: dict) -> list[str]:
    """:func:`ladder_placement` in words, one or two lines."""
    why = (f"the rung nearest this run's {lp['params']:.3g} parameters"
           if lp["chosen_by"] == "params" else
           "the largest rung (pass --params N to compare with the rung nearest your model)")
    head = f"on the model-size ladder, {why} is {lp['rung']} ({lp['rung_params']:,} parameters): "
    if lp["interval"] is None:
        return [head + f"no threshold measured there yet ({lp['reason']})."]
    low, high = lp["interval"]
    return [head + f"GRPO's threshold lies in [{low:.2g}, {high:.2g}] (matched recipe); this "
            f"run's k3 is {PLACEMENTS[lp['placement']].split(':')[0]}."]
