"""What a run starts from: the model, the task speaking its tokenizer, and their record.

A run's model is ``warm`` (the task's supervised warm start, found or trained in the cache),
``tiny`` (a random tiny LM built from the run's seed, for tests) or a folder a user saved with
``save_pretrained`` (:attr:`~tailtheory.engine.config.TrainConfig.model`). A folder's model and
the warm start alike carry their tokenizer beside their weights, and the task speaks it
(STYLE rule 19: text at the edges, ids inside): :func:`load_start` reads both and checks them
before a run writes anything, so a folder that cannot serve (no tokenizer, one that cannot write
the task's words, one longer than the model's vocabulary, no EOS, an architecture the ``fast``
rollout engine cannot run) is one line naming the fix.

A run records where it started in ``RUN/provenance.json`` (:func:`record_provenance`): the
fingerprint of the starting weights and the CPU (:mod:`tailtheory.core.provenance`), and for a
folder the fingerprint of what it holds, weights and tokenizer
(:func:`~tailtheory.core.models.checkpoint_fingerprint`; the run cache keys on it too), so a run
is never resumed from another model saved at the same path (:func:`check_same_folder`).

A study's worker on another machine trains from a :class:`FolderCopy`: the folder's files
written to a private folder there, read in its place, with the run's record naming the folder
the driver read (:mod:`tailtheory.experiments.remote`), so the run is the one the driver's
machine would have trained, path included.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tailtheory.core.io import atomic_write_json
from tailtheory.core.models import (checkpoint_fingerprint, lm_config, load_lm, load_tokenizer,
                                    skeleton_lm, tiny_lm)
from tailtheory.core.provenance import cpu_model, provenance, weights_fingerprint
from tailtheory.engine.checkpoint import CHECKPOINT
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.rollout.engine import FAST
from tailtheory.engine.start.rungs import BASE, rung
from tailtheory.engine.start.sft import SFTConfig
from tailtheory.engine.start.warm_cache import warm_start
from tailtheory.engine.tasks.chat import generation_eos_ids
from tailtheory.engine.tasks.task import get_task
from tailtheory.engine.tasks.tokenizer import check_tokenizer


def load_task(cfg: TrainConfig, tokenizer=None, vocab_size: int | None = None, folder=None):
    """The task named by ``cfg``, speaking ``tokenizer`` to a model of ``vocab_size`` rows
    (``None``: the toolkit's word-level tokenizer, the one a warm start saves beside its
    weights); a response also ends at the EOS ids of ``folder``'s generation config
    (:func:`~tailtheory.engine.tasks.chat.generation_eos_ids`)."""
    return get_task(cfg.task, seed=cfg.seed, tokenizer=tokenizer, vocab_size=vocab_size,
                    stop_ids=generation_eos_ids(folder), **_task_kwargs(cfg))


def _task_kwargs(cfg: TrainConfig) -> dict:
    kk = cfg.task.startswith("kk")
    return {"n_people": cfg.n_people} if kk and cfg.n_people != 3 else {}


def warm_config(cfg: TrainConfig):
    """The :class:`~tailtheory.engine.start.sft.SFTConfig` of the warm start ``model="warm"`` uses:
    the task's, or the rung's (``cfg.rung``, :mod:`tailtheory.engine.start.rungs`)."""
    if cfg.rung != BASE:
        return rung(cfg.rung).warm(cfg.task)
    return SFTConfig.for_task(cfg.task, task_kwargs=_task_kwargs(cfg))


def from_folder(cfg: TrainConfig) -> bool:
    """Whether ``cfg.model`` names a saved model's folder (not ``warm`` or ``tiny``)."""
    return cfg.model not in ("warm", "tiny")


@dataclass(frozen=True)
class FolderCopy:
    """A copy of the folder ``cfg.model`` names, on a machine where that path is not read: a
    study's worker (:mod:`tailtheory.experiments.remote`). The run reads the model from
    :attr:`here` and records :attr:`origin` as where it started (:func:`start_key`)."""

    here: Path
    """The folder the copy's files are in, on this machine."""
    origin: str
    """The folder copied, resolved on the machine that read it (``Path(cfg.model).resolve()``
    there): what a run started from it records, as a run there would."""


def _model_folder(cfg: TrainConfig, copy: FolderCopy | None = None):
    """The folder a folder-started run reads its model from: ``copy``'s when given, else
    ``cfg.model``."""
    return copy.here if copy is not None else cfg.model


def check_start(cfg: TrainConfig, folder: str | Path):
    """The tokenizer saved in ``folder``, after every check the folder must pass before its
    weights load (:func:`load_start`); one ``ValueError`` line naming the fix otherwise."""
    config = lm_config(folder)
    tokenizer = load_tokenizer(folder)
    check_tokenizer(tokenizer, config.vocab_size, str(folder))
    if cfg.rollout_backend == FAST:
        from tailtheory.engine.rollout.engine import check_backend

        check_backend(skeleton_lm(config), FAST, f"the model in {folder}")
    return tokenizer


def load_start(cfg: TrainConfig, warm: str | Path | None = None, task=None,
               copy: FolderCopy | None = None) -> tuple:
    """``(model, task)`` a run starts from: the float32 model named by ``cfg.model`` and the task
    speaking its tokenizer, the one saved beside it (a checkpoint's, a warm start's; a ``tiny``
    model speaks the word-level tokenizer it is built for). ``task`` replaces the task; ``copy``:
    a folder model's copy, read in place of ``cfg.model`` (:class:`FolderCopy`).

    Everything a folder must hold is checked here, before its weights load, so
    :func:`~tailtheory.engine.trainer.train` calls this before it writes anything to ``--out``:
    a model config, a tokenizer with an EOS that writes the task's words in no more ids than the
    model has rows (:func:`~tailtheory.engine.tasks.tokenizer.check_tokenizer`), and, with the ``fast``
    rollout backend, an architecture the inference engine runs (no silent fallback to ``hf``).
    Each failure is one ``ValueError`` line naming the fix (:func:`check_start`)."""

    if cfg.model == "tiny":
        task = task or load_task(cfg)
        return load_model(cfg, task), task
    folder = _model_folder(cfg, copy) if from_folder(cfg) else warm or _warm_folder(cfg)
    tokenizer = check_start(cfg, folder)                # every check before the weights load
    model = load_lm(folder, device="cpu").float().eval()
    return model, task or load_task(cfg, tokenizer, model.config.vocab_size, folder)


def _warm_folder(cfg: TrainConfig) -> Path:
    return warm_start(warm_config(cfg))


def load_model(cfg: TrainConfig, task, warm: str | Path | None = None):
    """The float32 trainer model named by ``cfg.model`` (see :class:`TrainConfig`); ``warm``: the
    warm start's directory when the caller found it already (:func:`train`), else it is found (or
    trained) here."""
    if cfg.model == "tiny":
        model = tiny_lm(vocab_size=task.vocab_size, hidden=32, layers=1, heads=2, kv_heads=1,
                        seed=cfg.seed)
    elif cfg.model == "warm":
        model = load_lm(warm or _warm_folder(cfg), device="cpu")
    else:
        model = load_lm(cfg.model, device="cpu")
    return model.float().eval()


PROVENANCE = "provenance.json"
"""A run's starting model and CPU (:func:`record_provenance`), read into every stored row."""


def start_key(cfg: TrainConfig, copy: FolderCopy | None = None) -> str | None:
    """The key of the model a run starts from: the warm start's config hash, ``path:<dir>`` for a
    checkpoint (``copy``: its :attr:`~FolderCopy.origin`), ``None`` for a model built from the
    run's seed."""
    if cfg.model == "warm":
        from tailtheory.engine.start.sft import config_hash

        return config_hash(warm_config(cfg))
    if cfg.model == "tiny":
        return None
    return f"path:{copy.origin if copy is not None else Path(cfg.model).resolve()}"


def record_provenance(run: Path, cfg: TrainConfig, model, resume: bool,
                      copy: FolderCopy | None = None) -> dict:
    """Write ``RUN/provenance.json`` at a run's start: the fingerprint of the weights it starts
    from and the CPU (:mod:`tailtheory.core.provenance`), and for a model saved in a folder the
    folder's :func:`~tailtheory.core.models.checkpoint_fingerprint` (weights and tokenizer).

    A resumed run with a checkpoint keeps its record and adds the CPU it continues on when that
    is another one (:func:`check_same_folder` refused it first if its folder now holds another
    model). A run resumed before its first checkpoint starts again from step 0, so its record is
    written anew. ``copy``: the run reads a copy of its folder (:class:`FolderCopy`), recorded
    as the folder itself."""

    path = run / PROVENANCE
    if resume and path.exists() and (run / CHECKPOINT).exists():
        prov = json.loads(path.read_text())
        if cpu_model() not in [prov["cpu"], *prov.get("resumed_on", [])]:
            prov["resumed_on"] = [*prov.get("resumed_on", []), cpu_model()]
            atomic_write_json(path, prov)
        return prov
    prov = provenance(start_key(cfg, copy), weights_fingerprint(model))
    if from_folder(cfg):
        prov["checkpoint"] = checkpoint_fingerprint(_model_folder(cfg, copy))
    atomic_write_json(path, prov)
    return prov


def check_same_folder(run: Path, cfg: TrainConfig, copy: FolderCopy | None = None) -> None:
    """Refuse (one line, before anything is read or written) to resume a run with a checkpoint
    whose model folder now holds another model than the one it started from: other weights or
    another tokenizer (:func:`~tailtheory.core.models.checkpoint_fingerprint`, recorded in its
    :data:`PROVENANCE`). A run without a checkpoint starts again from step 0: nothing to refuse.
    ``copy``: the folder is read from a copy (:class:`FolderCopy`)."""
    prov = read_provenance(run) if (run / CHECKPOINT).exists() else None
    if not prov or prov.get("checkpoint") is None:
        return
    now = checkpoint_fingerprint(_model_folder(cfg, copy))
    if now != prov["checkpoint"]:
        raise ValueError(f"--resume: {run} started from the model in {cfg.model} (fingerprint "
                         f"{prov['checkpoint']}), which now holds another one ({now}: other "
                         f"weights or another tokenizer); put the model it started from back "
                         f"there, or start a new run with another --out")


def read_provenance(run: str | Path) -> dict | None:
    """A run's :data:`PROVENANCE` record (``None`` for a run made before runs recorded one)."""
    path = Path(run) / PROVENANCE
    return json.loads(path.read_text()) if path.exists() else None
