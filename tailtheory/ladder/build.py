"""The model-size ladder of the ``matched`` testbed: named rungs of one architecture.

Every trained-model verdict of ``matched`` rests on one size (the base rung: width 128, 4 layers,
1.64M parameters, 0.59M of them outside the input embedding and the output head); the papers'
models have 1.5B to 7B. A rung is the same pipeline at another size: the corpus LM pretrained on
the Python standard library (:mod:`tailtheory.engine.start.corpus_lm`), then the ``kk_prose``
warm start into the recipe's accuracy window (:mod:`tailtheory.engine.start.sft`), both cached
under their config hashes. The base rung's configs are today's, so its hashes, and every stored
row keyed by them, are unchanged.

The rungs and the rule that sizes them: :mod:`tailtheory.engine.start.rungs` (width and depth
together; pretraining tokens the base rung's times the square root of the non-embedding ratio;
learning rates times ``128 / w``). The corpus holds about 1.02M training tokens, so the larger
rungs repeat it (epochs in :func:`facts`): size is confounded with training state, so every
rung records its held-out perplexity, and every trend is read beside it.

``tailtheory ladder list`` prints the rungs, ``tailtheory ladder build`` builds them (cached) and
records each in ``results/ladder.json`` (``tailtheory measure ladder``: every rung); ``verify``
reads that record and never builds.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

from tailtheory.core.measurements import measurement_path, update_measurement
from tailtheory.core.provenance import cpu_model
from tailtheory.engine.start.corpus_lm import RECORD, CorpusLMConfig, corpus_key, corpus_lm
from tailtheory.engine.start.corpus_lm import cache_root as corpus_root
from tailtheory.engine.start.resume import STATE, partial_folder, progress
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.load import load_start
from tailtheory.engine.start.rungs import (RUNGS, TASK, TASK_KWARGS, Rung, check_build,
                                          non_embedding_params, params, rung)
from tailtheory.engine.start.sft import config_hash
from tailtheory.engine.start.warm_cache import cache_root as warm_root
from tailtheory.engine.start.warm_cache import committed, read_record, warm_start, warm_weights
from tailtheory.ladder import models
from tailtheory.experiments.measures import Measure, measure_command, register_measure

BASE_TOKENS = CorpusLMConfig().steps * CorpusLMConfig().batch_size * CorpusLMConfig().seq_len
"""The base rung's pretraining tokens (600 steps x 16 windows x 128 tokens)."""

CORPUS_TRAIN_TOKENS = 1_019_611
"""Training tokens of the corpus on Python 3.11's standard library (the base rung's record):
the epochs of :func:`facts` divide by it; another Python's corpus differs by a few percent."""

BASE_SECONDS = {"corpus": 498.0, "warm": 1090.0}
"""The base rung's measured build, one thread of this 2-core CPU (AMD EPYC): corpus LM training
498 s, ``kk_prose`` warm start 1,090 s; :func:`facts` scales them by parameters x tokens for an
estimate (the larger rungs' matrix products run closer to the peak, so it is an upper bound)."""


def facts(r: Rung) -> dict:
    """The rung table's row of ``r``: shape, parameters, tokens, epochs, fp32 MB and the
    estimated CPU-minutes of its build (module docstring)."""
    c, base = r.corpus(), RUNGS[0]
    tokens = c.steps * c.batch_size * c.seq_len
    n, n0 = params(r.model), params(base.model)
    scale = n * tokens / (n0 * BASE_TOKENS)
    return {"rung": r.name, "hidden": r.hidden, "layers": r.layers, "heads": r.model.heads,
            "kv_heads": r.model.kv_heads, "params": n,
            "non_embedding_params": non_embedding_params(r.model),
            "non_embedding_ratio": round(r.ratio, 2), "pretrain_tokens": tokens,
            "tokens_per_param": round(tokens / n, 2),
            "epochs": round(tokens / CORPUS_TRAIN_TOKENS, 2), "fp32_mb": round(4 * n / 1e6, 1),
            "corpus_lr": c.lr, "warm_lr": r.warm().lr,
            "cpu_minutes_estimate": round((BASE_SECONDS["corpus"] * scale
                                           + BASE_SECONDS["warm"] * n / n0) / 60)}


LADDER = "ladder"
"""``results/ladder.json``: in its config every rung's :func:`facts` (``params``,
``non_embedding_params``, ...), in its data each built rung's row: the facts and what its build
measured (held-out perplexity, the warm start's accuracy, seconds, cache keys, the fingerprints
of its warm start and corpus LM, CPU)."""

COMMAND = "tailtheory ladder build"
"""Builds rungs (``--rung NAME``: one), what a measurement on a rung not built here says to run."""


def ladder_config() -> dict:
    """What ``results/ladder.json`` is keyed by: every rung's :func:`facts`."""
    return {"rungs": [facts(r) for r in RUNGS]}


def build(names: list[str] | None = None, progress: bool = True, threads: int = 0,
          builds: tuple[int, ...] = (0,), corpus_lms: bool = True) -> list[dict]:
    """Build ``builds`` (default: build 0) of the rungs ``names`` (default: all, smallest
    first): the corpus LM, then the warm start, each found in its cache, adopted from
    ``weights/`` or trained (a stopped one continues from its last checkpoint). Each built model
    is recorded in ``results/ladder_models.json`` under its label
    (:mod:`tailtheory.ladder.models`) as it finishes, build 0 also in ``results/ladder.json``
    (the rung record the earlier measurements read); a later build's failure loses nothing.
    Returns the built rows. A warm start that misses its window raises
    :class:`~tailtheory.engine.start.warm_cache.WarmStartMissed` (saying what to do) after
    the builds before it are stored. ``corpus_lms=False`` records a warm start committed in
    ``weights/`` without building its corpus LM (no perplexity, no V8 until it is built); a
    build that is not committed is then a ``ValueError``."""
    todo = [rung(n) for n in names] if names else list(RUNGS)
    builds = tuple(check_build(b) for b in builds)
    rows = []
    for r in todo:
        for b in builds:
            t0 = time.perf_counter()
            if not corpus_lms:
                if committed(r.warm(build=b)) is None:
                    raise ValueError(f"build {b} of rung {r.name} is not committed in weights/: "
                                     f"its warm start needs its corpus LM; build both "
                                     f"({COMMAND} --rung {r.name} --build {b})")
                warm = warm_start(r.warm(build=b), progress=progress, threads=threads)
                model = models.model_row(r.name, b, warm, None)
                models.store(model, measure_command(models.MODELS))
                rows.append(model)
                continue
            corpus = corpus_lm(r.corpus(b), progress=progress, threads=threads)
            c = json.loads((corpus / RECORD).read_text())
            warm = warm_start(r.warm(build=b), progress=progress, threads=threads)
            warm_weights(r.warm(build=b))                       # an older record: fingerprinted
            w = read_record(warm)
            model = models.model_row(r.name, b, warm, corpus)
            models.store(model, measure_command(models.MODELS))
            row = {**facts(r), "built": True, "build": b, "label": model["label"],
                   "heldout_loss": c["heldout_loss"], "heldout_ppl": c["heldout_ppl"],
                   "corpus_key": corpus.name, "corpus_seconds": c["seconds"],
                   "corpus_weights": (model["corpus"] or {}).get("weights"),
                   "warm_key": warm.name, "warm_accuracy": w["accuracy"],
                   "warm_steps": w["steps"], "warm_window": w["window"],
                   "warm_seconds": w["seconds"], "warm_weights": w.get("weights"),
                   "seconds_here": round(time.perf_counter() - t0, 1), "cpu": cpu_model()}
            if b == 0:
                _store(_keep_previous(row, stored().get(r.name)))
            rows.append(row)
    return rows


def _keep_previous(row: dict, old: dict | None) -> dict:
    """``row`` with ``previous_builds``: the recorded builds of its rung that were another model
    (another warm-start fingerprint, or, for a row that records none, another held-out loss or
    warm-start accuracy; a warm start rebuilt on another CPU is another model), each one's CPU,
    perplexity, accuracy and fingerprint, said on stderr as it is replaced."""
    if not old:
        return row
    earlier = list(old.get("previous_builds", []))
    if old.get("warm_weights"):
        same = old["warm_weights"] == row["warm_weights"]
    else:
        same = (old.get("heldout_loss"), old.get("warm_accuracy")) == (row["heldout_loss"],
                                                                        row["warm_accuracy"])
    if not same:
        gone = {k: old.get(k) for k in ("cpu", "heldout_ppl", "warm_accuracy", "warm_steps",
                                        "warm_weights", "corpus_weights")}
        earlier.append(gone)
        print(f"tailtheory: rung {row['rung']} was built as another model than "
              f"results/{LADDER}.json recorded (made on {gone['cpu']}: perplexity "
              f"{gone['heldout_ppl']:.1f}, warm start {gone['warm_accuracy']:.3f}; here on "
              f"{row['cpu']}: {row['heldout_ppl']:.1f}, {row['warm_accuracy']:.3f}); the earlier "
              f"build is kept under previous_builds, and measurements made on it keep theirs",
              file=sys.stderr)
    return {**row, "previous_builds": earlier} if earlier else row


def store_rung(store: str, name: str, value, config: dict, command: str) -> None:
    """Put ``value`` under rung ``name`` in ``results/<store>.json`` (data: rung -> value, in
    the ladder's order), keeping the other rungs' values, under the store's lock: what each
    ladder measurement stores as a rung finishes."""
    names = {r.name for r in RUNGS}

    def merged():
        try:
            old = json.loads(measurement_path(store).read_text())["data"]
        except (OSError, ValueError, KeyError, TypeError):
            old = {}
        data = {k: v for k, v in (old.items() if isinstance(old, dict) else ()) if k in names}
        data[name] = value
        return config, {r.name: data[r.name] for r in RUNGS if r.name in data}

    update_measurement(store, merged, command)


def _store(row: dict) -> None:
    """Record a built rung in ``results/ladder.json`` (config: every rung's :func:`facts`)."""
    store_rung(LADDER, row["rung"], row, ladder_config(), measure_command(LADDER))


def stored() -> dict[str, dict]:
    """The built rungs of ``results/ladder.json`` by name (none when it is missing)."""
    try:
        data = json.loads(measurement_path(LADDER).read_text())["data"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) \
        else {}


def require_built(name: str, *paths) -> None:
    """A ``ValueError`` naming the build command unless rung ``name`` is recorded built and each
    of ``paths`` (its cached files) exists here: the ladder's measurements never train."""
    if name not in stored() or not all(p.exists() for p in paths):
        raise ValueError(f"rung {name!r} is not built here; build it first: {COMMAND} "
                         f"--rung {name}")


def status() -> list[dict]:
    """Per rung: whether it is built, and else how far its corpus LM and its warm start are
    (``done``, ``step K`` of a stopped build's last checkpoint, or ``not started``) in this
    cache, with the steps each build takes; a warm start not in the cache but committed with the
    repository (``weights/``) is ``committed``: the cache adopts it on first use, nothing to
    train."""
    built, out = stored(), []
    for r in RUNGS:
        row = {"rung": r.name, "built": r.name in built}
        for part, final, steps in (
                ("corpus", corpus_root() / corpus_key(r.corpus()), r.corpus().steps),
                ("warm", warm_root() / config_hash(r.warm()), r.warm().max_steps)):
            done = (final / (RECORD if part == "corpus" else "sft.json")).exists()
            ckpt, most = progress(final), "" if part == "corpus" else "at most "
            kept = None if done or part == "corpus" else committed(r.warm())
            row[part] = ("done" if done else
                         f"committed ({kept.relative_to(kept.parents[1]).as_posix()}/, adopted "
                         f"on first use)" if kept is not None else
                         f"step {ckpt['step']} of {most}{steps} (checkpoint {ckpt['saved']})"
                         if ckpt else "checkpointed" if (partial_folder(final) / STATE).exists()
                         else f"not started ({most}{steps} steps)")
        out.append(row)
    return out


def built_names(names: list[str] | None = None) -> list[str]:
    """``names``, or every rung ``results/ladder.json`` holds built, in the ladder's order."""
    built = stored()
    return list(names) if names else [r.name for r in RUNGS if r.name in built]


def warm_policy(name: str, cfg: TrainConfig | None = None) -> tuple:
    """``(model, task, folder)``: rung ``name``'s warm start as a run ``cfg`` starts from it
    (default: the ``matched`` task on that rung); a rung not built here is
    :func:`require_built`'s error (the ladder's measurements never train)."""
    warm = warm_root() / config_hash(rung(name).warm())
    require_built(name, warm / "sft.json")
    cfg = cfg or TrainConfig(task=TASK, n_people=TASK_KWARGS["n_people"], model="warm",
                             rung=name)
    model, task = load_start(replace(cfg, rung=name), warm=warm)
    return model, task, warm


def table() -> str:
    """The rung table as text: each rung's facts, the named models recorded for it
    (``results/ladder_models.json``), and build 0's held-out perplexity and warm-start accuracy
    where ``results/ladder.json`` has them; a last line says what the columns are."""
    built, named = stored(), models.by_rung()
    head = (f"{'rung':6s} {'width':>5s} {'depth':>5s} {'params':>11s} {'non-emb':>11s} "
            f"{'x base':>6s} {'tokens':>10s} {'tok/param':>9s} {'epochs':>6s} {'fp32 MB':>7s} "
            f"{'CPU-min':>7s} {'models':>6s} {'ppl':>6s} {'warm acc':>8s}")
    lines = [head]
    for r in RUNGS:
        f, b = facts(r), built.get(r.name, {})
        ppl = f"{b['heldout_ppl']:.1f}" if b else "-"
        acc = f"{b['warm_accuracy']:.3f}" if b else "-"
        lines.append(f"{r.name:6s} {f['hidden']:5d} {f['layers']:5d} {f['params']:11,d} "
                     f"{f['non_embedding_params']:11,d} {f['non_embedding_ratio']:6.2f} "
                     f"{f['pretrain_tokens']:10,d} {f['tokens_per_param']:9.2f} "
                     f"{f['epochs']:6.2f} {f['fp32_mb']:7.1f} {f['cpu_minutes_estimate']:7d} "
                     f"{len(named.get(r.name, [])):6d} {ppl:>6s} {acc:>8s}")
    lines.append("models: the rung's named builds (tailtheory ladder status lists each); ppl, warm "
                 "acc: build 0 as results/ladder.json records it")
    return "\n".join(lines)


MEASURE = register_measure(Measure(
    LADDER, "the model-size ladder's rungs built (corpus LM, kk_prose warm start) with their "
    "held-out perplexity and warm-start accuracy", "the rung table's estimate: 26 CPU minutes "
    "(base) to about 850 (w448), about 26 CPU hours for all five; cached rungs are not rebuilt",
    ladder_config, lambda: build(), resume="yes"))

MODELS_MEASURE = register_measure(Measure(
    models.MODELS, "the ladder's models, each build of a rung named by its weights fingerprint, "
    "with the machine that built it and its held-out perplexity", "as `ladder`: build 0 of every "
    "rung (`tailtheory ladder build --rung R --build B` adds another build)",
    lambda: {"label": models.LABEL_FORM}, lambda: build(), resume="yes"))
