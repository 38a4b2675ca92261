"""The ladder's models: every build of a rung named by its weights, and where it is kept.

A rung's config names a recipe, not a model. Build ``b`` of a rung
(:meth:`~tailtheory.engine.start.rungs.Rung.warm`) is corpus-LM seed ``b`` and warm-start seed
``b``; the model it gives depends on the machine that trained it (float32 kernels differ in their
last bits between instruction sets, and a few hundred steps carry the difference into another
model). So a model is named by its weights: its **label** is ``{rung}.b{build}-{fingerprint}``
(the first 8 hex digits of the warm start's
:func:`~tailtheory.core.provenance.weights_fingerprint`), e.g. ``base.b0-0910fc60``; two builds of
one config on two CPUs are two labels, two models.

``results/ladder_models.json`` holds one row per model (label -> row): the rung, the build, the
warm start (config key, fingerprint, machine, accuracy, steps, whether it came from
``weights/``), its corpus LM (key, fingerprint, machine, held-out perplexity) where it was built
here, and the non-embedding parameters a trend reads. Each model is

- **committed**: ``weights/<folder>/`` holds its weights (any checkout can measure it again);
- **recorded**: its fingerprint, machine and perplexity are recorded, its weights are not kept
  in the repository (a cache may hold them: :func:`locate`); its rows count;
- **unrecorded**: a rung of the earlier record ``results/ladder.json``, whose rows name no
  fingerprint (:func:`unrecorded`): shown, kept as superseded records, out of every verdict.

Every measurement on a model (:mod:`tailtheory.ladder.mismatch`, :mod:`tailtheory.ladder.effects`)
stores its rows under the model's label with the fingerprint and the machine that measured it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tailtheory.core.measurements import measurement_path, update_measurement
from tailtheory.core.provenance import cpu_model, weights_fingerprint
from tailtheory.engine.start.corpus_lm import RECORD, load_corpus_lm, read_corpus_record
from tailtheory.engine.start.rungs import RUNGS, check_build, non_embedding_params, params, rung
from tailtheory.engine.start.sft import config_hash
from tailtheory.engine.start.warm_cache import COMMITTED, cache_root as warm_root
from tailtheory.engine.start.warm_cache import load_warm_start, read_record

MODELS = "ladder_models"
"""``results/ladder_models.json``: label -> the model's row (module docstring)."""

FINGERPRINT_DIGITS = 8
"""Hex digits of the warm start's fingerprint in a label."""

LEGACY = "ladder"
"""``results/ladder.json``: the rungs as first built, one row a rung, no weights fingerprint."""

LABEL_FORM = (f"RUNG.bBUILD-first {FINGERPRINT_DIGITS} hex digits of the warm start's weights "
              f"fingerprint")
"""What ``results/ladder_models.json`` is keyed by (its config)."""

STATES = ("committed", "recorded", "unrecorded")
"""What a model's weights are to a checkout (module docstring)."""



def label(rung_name: str, build: int, weights: str) -> str:
    """The name of build ``build`` of rung ``rung_name`` whose warm start's fingerprint is
    ``weights`` (16 hex digits): ``{rung}.b{build}-{weights[:8]}``."""
    rung(rung_name)
    check_build(build)
    if not (isinstance(weights, str) and len(weights) >= FINGERPRINT_DIGITS
            and all(c in "0123456789abcdef" for c in weights)):
        raise ValueError(f"a weights fingerprint is lowercase hex (16 digits), got {weights!r}")
    return f"{rung_name}.b{build}-{weights[:FINGERPRINT_DIGITS]}"


def parse_label(name: str) -> tuple[str, int, str]:
    """``(rung, build, fingerprint prefix)`` of a label; a ``ValueError`` saying the form
    otherwise."""
    try:
        head, fp = name.rsplit("-", 1)
        rung_name, b = head.rsplit(".b", 1)
        build = int(b)
    except (ValueError, AttributeError):
        raise ValueError(f"a model label reads RUNG.bBUILD-FINGERPRINT (e.g. base.b0-0910fc60), "
                         f"got {name!r}") from None
    rung(rung_name)
    check_build(build)
    return rung_name, build, fp


def sort_key(name: str) -> tuple:
    """A label's place in the ladder's order: rung, then build, then fingerprint."""
    r, b, fp = parse_label(name)
    return [x.name for x in RUNGS].index(r), b, fp


def read() -> dict[str, dict]:
    """``results/ladder_models.json``'s models, label -> row, in the ladder's order (smallest
    rung first, then build); none when it is missing."""
    try:
        data = json.loads(measurement_path(MODELS).read_text())["data"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: data[k] for k in sorted(data, key=sort_key) if isinstance(data[k], dict)}


def committed_folder(weights: str) -> Path | None:
    """The folder of ``weights/`` whose warm start has fingerprint ``weights`` (its ``sft.json``
    record), or ``None``."""
    if not COMMITTED.is_dir():
        return None
    for folder in sorted(COMMITTED.iterdir()):
        try:
            if read_record(folder).get("weights") == weights:
                return folder
        except (FileNotFoundError, ValueError):
            continue
    return None


def state(row: dict) -> str:
    """``committed`` or ``recorded`` (:data:`STATES`) of a row of :func:`read`."""
    return "committed" if committed_folder(row["warm"]["weights"]) is not None else "recorded"


def locate(name: str) -> Path | None:
    """A warm-start folder holding model ``name``'s weights here: its cache entry when the
    fingerprint its record holds is the model's, else the committed folder; ``None`` when
    neither (the model is recorded, its weights not kept here)."""
    row = read().get(name)
    if row is None:
        raise ValueError(f"no model {name!r} in results/{MODELS}.json; the models: "
                         f"{', '.join(read()) or 'none (tailtheory ladder build)'}")
    want = row["warm"]["weights"]
    cached = warm_root() / row["warm"]["key"]
    try:
        if read_record(cached).get("weights") == want:
            return cached
    except (FileNotFoundError, ValueError):
        pass
    return committed_folder(want)


def load(name: str, device: str = "cpu") -> tuple:
    """``(model, task, folder)``: model ``name``'s warm start, its fingerprint checked against
    the label's (a cache entry rebuilt on another machine under the same key is another model,
    and is refused). A model whose weights are not kept here is a ``ValueError`` saying so and
    naming the build command (whose result on this machine may be another model)."""
    folder = locate(name)
    rung_name, build, _ = parse_label(name)
    if folder is None:
        raise ValueError(f"model {name} is recorded but its weights are not kept here (not in "
                         f"this cache, not in weights/); `tailtheory ladder build --rung "
                         f"{rung_name} --build {build}` builds that recipe again, which on "
                         f"another machine is another model with another label")
    model, task = load_warm_start(folder, device=device)
    got = weights_fingerprint(model.float())
    if got != read()[name]["warm"]["weights"]:
        raise ValueError(f"{folder} holds weights {got}, not model {name}'s "
                         f"{read()[name]['warm']['weights']}; it was changed after it was "
                         f"recorded: restore it (git checkout -- weights/) or rebuild")
    return model, task, folder


def corpus_facts(path: Path) -> dict:
    """The corpus-LM part of a model's row: key, fingerprint, machine, held-out perplexity and
    seconds of the corpus LM in folder ``path`` (a record made before corpus LMs recorded their
    fingerprint is fingerprinted now; its machine is then ``None``: unrecorded)."""
    rec = read_corpus_record(path)
    weights = rec.get("weights")
    if weights is None:
        model, _ = load_corpus_lm(path, device="cpu")
        weights = weights_fingerprint(model.float())
    return {"key": path.name, "weights": weights, "cpu": rec.get("cpu"),
            "heldout_ppl": rec["heldout_ppl"], "heldout_loss": rec["heldout_loss"],
            "seconds": rec.get("seconds")}


def model_row(rung_name: str, build: int, warm: Path, corpus: Path | None) -> dict:
    """The row of build ``build`` of rung ``rung_name`` whose warm start is the folder ``warm``
    and corpus LM the folder ``corpus`` (``None``: not built here)."""
    rec, r = read_record(warm), rung(rung_name)
    if rec.get("weights") is None:
        raise ValueError(f"{warm}/sft.json records no weights fingerprint; fingerprint it first "
                         f"(tailtheory.engine.start.warm_cache.warm_weights)")
    if rec.get("hash") not in (None, config_hash(r.warm(build=build))):
        raise ValueError(f"{warm} is warm start {rec.get('hash')}, not build {build} of rung "
                         f"{rung_name} ({config_hash(r.warm(build=build))})")
    return {"label": label(rung_name, build, rec["weights"]), "rung": rung_name, "build": build,
            "params": params(r.model), "non_embedding_params": non_embedding_params(r.model),
            "warm": {"key": warm.name, "weights": rec["weights"], "cpu": rec.get("cpu"),
                     "accuracy": rec["accuracy"], "steps": rec["steps"],
                     "seconds": rec.get("seconds")},
            "corpus": corpus_facts(corpus) if corpus is not None and (corpus / RECORD).exists()
            else None, "recorded_on": cpu_model()}


def store(row: dict, command: str) -> None:
    """Record ``row`` (:func:`model_row`) in ``results/ladder_models.json`` under its label,
    keeping every other model's row (a model is never replaced by another: another build is
    another label)."""
    def merged():
        try:
            old = json.loads(measurement_path(MODELS).read_text())["data"]
        except (OSError, ValueError, KeyError, TypeError):
            old = {}
        data = {k: v for k, v in (old.items() if isinstance(old, dict) else ())}
        data[row["label"]] = row
        return {"label": LABEL_FORM}, {k: data[k] for k in sorted(data, key=sort_key)}

    update_measurement(MODELS, merged, command)


def unrecorded() -> list[dict]:
    """The rungs of ``results/ladder.json`` (the first builds, whose rows record no weights
    fingerprint, also where a rung was built again and keeps them under ``previous_builds``):
    per rung its machine, perplexity and warm-start accuracy, and the reason it is
    out of every verdict."""
    try:
        data = json.loads(measurement_path(LEGACY).read_text())["data"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    out = []
    for r in RUNGS:
        row = data.get(r.name) if isinstance(data, dict) else None
        if not isinstance(row, dict):
            continue
        # a rung built again here keeps its first build under previous_builds
        for x in [row, *[p for p in row.get("previous_builds", []) if isinstance(p, dict)]]:
            if not x.get("warm_weights"):
                out.append({"rung": r.name, "cpu": x.get("cpu"), "heldout_ppl": x.get(
                    "heldout_ppl"), "warm_accuracy": x.get("warm_accuracy"),
                    "warm_key": x.get("warm_key", row.get("warm_key")), "state": "unrecorded",
                    "why": "no weights fingerprint recorded: which model its rows measured is "
                           "not known, so they stay as superseded records, out of every "
                           "verdict"})
    return out


def by_rung(models: dict | None = None) -> dict[str, list[str]]:
    """Rung -> the labels of its recorded models, in build order."""
    models = read() if models is None else models
    out: dict[str, list[str]] = {r.name: [] for r in RUNGS}
    for name, row in models.items():
        out[row["rung"]].append(name)
    return out


def summary() -> list[dict]:
    """Per model: label, state (:data:`STATES`), machine of the warm start, perplexity and
    accuracy; the unrecorded rungs after them."""
    rows = [{"label": k, "state": state(v), "cpu": v["warm"]["cpu"],
             "heldout_ppl": (v["corpus"] or {}).get("heldout_ppl"),
             "warm_accuracy": v["warm"]["accuracy"]} for k, v in read().items()]
    return rows + [{"label": f"{u['rung']} (first build)", **u} for u in unrecorded()]
