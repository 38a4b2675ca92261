"""Where a run's numbers came from: the fingerprint of its starting weights and the CPU it ran on.

A warm start is named by its config (:func:`~tailtheory.engine.start.sft.config_hash`), but the model
that config trains depends on the machine: float32 kernels differ in their last bits between CPU
types (MKL and oneDNN pick kernels per instruction set), and a few hundred supervised steps carry
those bits into a different model. The same warm-start config gave held-out accuracy 0.35-0.37 at
step 0 on one CPU and 0.49-0.54 on another. A stored measurement therefore records, in every row,
the fingerprint of the weights its run started from and the CPU it ran on
(:func:`provenance`), and an arm that would mix rows from two starting models is refused
(:func:`check_one_start`): numbers (not verdicts) are expected to move between CPUs, and a mean
over seeds from two models measures neither. A measurement that is not a training run names, in
each row, the model it measured and the machine it ran on (:func:`measured_on`).
"""

from __future__ import annotations

import hashlib
import platform
from functools import lru_cache
from typing import Callable, Iterable, Mapping


class MixedStarts(ValueError):
    """Rows of one stored measurement start from two different models under one warm-start key."""


def weights_fingerprint(model) -> str:
    """16 hex digits of SHA-256 over a model's parameters and buffers (name, dtype, shape, bytes,
    in name order): equal fingerprints mean bitwise-equal weights."""
    import torch

    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name and the instruction set torch's kernels use, e.g. ``"AMD EPYC 9B14
    (AVX512)"``: what decides a float32 result's last bits."""
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                        "")
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    try:
        import torch

        return f"{name} ({torch.backends.cpu.get_cpu_capability()})"
    except (ImportError, AttributeError):
        return name


def machine(device=None) -> str:
    """What ran a computation on ``device`` (default: the CPU): the GPU's name for a CUDA device
    (``"NVIDIA H200 (cuda)"``), else :func:`cpu_model`. The kernels, hence the last bits of
    every float result, are the machine's: a row names it beside the model it measured."""
    import torch

    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)} (cuda)"
    if dev.type != "cpu":
        return f"{dev.type} device"
    return cpu_model()


ROW_NAMES = ("weights", "machine")
"""The fields :func:`measured_on` adds to a stored row (a reader of the row's numbers leaves them
out)."""


def measured_on(model, weights: str | None = None) -> dict:
    """``{"weights", "machine"}``: what a stored row names the model it measured and the machine
    it ran on by (``tailtheory measure list`` reads both). ``weights``: default ``model``'s own
    fingerprint, of its float32 weights as the caches record them (``model.float()``: the models
    measured here are float32 already); a policy trained from a start passes the start's.
    ``machine``: :func:`machine` of the device ``model``'s parameters are on."""
    device = next(model.parameters()).device
    return {"weights": weights_fingerprint(model.float()) if weights is None else weights,
            "machine": machine(device)}


def provenance(start_key: str | None, start_weights: str, cpu: str | None = None) -> dict:
    """The provenance a stored row carries: the starting model's key (a warm start's config hash,
    or ``None`` for a model built from a seed), its weights' fingerprint, and the CPU."""
    return {"start": start_key, "weights": start_weights, "cpu": cpu or cpu_model()}


def check_one_start(rows: Iterable[tuple[str, Mapping]], where: str, fix: str) -> None:
    """Refuse ``rows`` (``(label, row)`` pairs) in which one warm-start key starts from two
    different weights: :class:`MixedStarts` naming both fingerprints, their CPUs, the arms, and
    ``fix``. Rows without a recorded provenance are not compared (nothing to compare with)."""
    seen: dict[str, tuple[str, str, str]] = {}
    for label, row in rows:
        prov = row.get("provenance") if isinstance(row, Mapping) else None
        if not prov or prov.get("start") is None:
            continue
        first = seen.setdefault(prov["start"], (prov["weights"], prov.get("cpu", "?"), label))
        if first[0] != prov["weights"]:
            raise MixedStarts(
                f"{where}: warm start {prov['start']} is two different models here: weights "
                f"{first[0]} (made on {first[1]}, arm {first[2]!r}) and {prov['weights']} (made on "
                f"{prov.get('cpu', '?')}, arm {label!r}, seed {row.get('seed')}); an arm's mean "
                f"over seeds from two models measures neither. {fix}")


# ---- what a stored row names ----------------------------------------------------------------

WEIGHTS_BESIDE = ("warm_key", "machine")
"""Keys beside which a row's ``weights`` is the fingerprint of the model it measured (a ladder
row keyed by its warm start; a row that names the machine it ran on,
:func:`measured_on`)."""

NAMED_WEIGHTS = ("warm_weights", "corpus_weights")
"""Keys that hold a model's fingerprint wherever they stand: a built rung's warm start, a row's
corpus LM (``v8_models``)."""

PARTS = ("warm", "corpus")
"""Keys of a model's parts, each a dict whose ``weights`` is that part's fingerprint
(``results/ladder_models.json``: a build's warm start and corpus LM)."""


def _walk(data, found: Callable[[dict], list]) -> list[str]:
    """The distinct strings ``found(d)`` lists for every dict ``d`` anywhere in ``data``,
    sorted."""
    out: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            out.update(v for v in found(x) if isinstance(v, str))
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(data)
    return sorted(out)


def _weights(row: dict) -> list:
    prov = row.get("provenance")
    return [prov.get("weights") if isinstance(prov, dict) else None,
            row.get("weights") if any(k in row for k in WEIGHTS_BESIDE) else None,
            *(row.get(k) for k in NAMED_WEIGHTS),
            *(row[k].get("weights") for k in PARTS if isinstance(row.get(k), dict))]


def models(data) -> list[str]:
    """The distinct weights fingerprints (:func:`weights_fingerprint`)
    found anywhere in ``data``, sorted: a row's ``provenance["weights"]`` (what
    :func:`check_one_start` compares), a row's ``weights`` beside
    :data:`WEIGHTS_BESIDE`, any of :data:`NAMED_WEIGHTS`, and the ``weights`` of a model's
    :data:`PARTS`."""
    return _walk(data, _weights)


def _machines(row: dict) -> list:
    prov = row.get("provenance")
    resumed = prov.get("resumed_on") if isinstance(prov, dict) else None
    return [row.get("machine"), row.get("cpu"), *(resumed if isinstance(resumed, list) else ())]


def machines(data) -> list[str]:
    """The distinct machines (:func:`machine`) named anywhere in
    ``data``, sorted: a row's ``machine``, its ``cpu`` (a row made on the CPU, or the CPU of a
    run's ``provenance``) and the CPUs a run was resumed on (``provenance["resumed_on"]``)."""
    return _walk(data, _machines)
