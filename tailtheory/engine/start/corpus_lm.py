"""A small causal LM pretrained here on a corpus every machine has offline: Python's own stdlib.

The tail claims (M7, P4, V2) need a model whose low-probability tail was made by training, not by
scaling a random head. The corpus is the ``.py`` source of the running interpreter's standard
library (``sysconfig.get_paths()["stdlib"]``): no download, and real text with a long-tailed token
distribution. Files are listed sorted by relative path, put in a fixed pseudo-random order (the
SHA-256 of the relative path, so the subset spreads over the whole library) and taken until
``corpus_bytes`` bytes; every ``heldout_every``-th of them is held out. The tokenizer is a
byte-level BPE trained on the training files by the ``tokenizers`` library (``vocab_size`` ids,
:data:`CORPUS_VOCAB` by default); the model a tiny Qwen2-style LM
(:func:`tailtheory.core.models.tiny_lm`) trained with AdamW on random windows of the token
stream for a fixed number of steps (a step count, never wall time).

The result is cached by a hash of the config and of the corpus bytes under
``cache/corpus_lm/<hash>/`` of the checkout (or ``$TAILTHEORY_CACHE/corpus_lm/<hash>/``):
``save_pretrained`` model (safetensors) and tokenizer, the held-out token stream
(``heldout.safetensors``) and ``corpus_lm.json`` (config, corpus, held-out loss and perplexity,
timings). It is written to a temporary folder and renamed into place: a crash leaves no half cache.
A different Python version has a different stdlib, hence another hash and another model.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.io import CACHE_ENV, atomic_write_json, cache_dir  # noqa: F401 (tests)
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.core.models import TinyLMConfig, damaged_weights, load_lm, num_params, tiny_lm
from tailtheory.engine.start.pretrain import heldout_loss, pretrain, windows
from tailtheory.engine.start.resume import Resume, digest, partial_folder
from tailtheory.engine.threads import resolve_threads, torch_threads

CORPUS_VOCAB = 4096
"""BPE vocabulary of the corpus LM: a subword vocabulary 8x the task models' 512, big enough for
a long tail, small enough that the output layer does not dominate a CPU step."""

CORPUS_LM_CACHE_VERSION = 1
"""Part of the cache hash: bump it when a change here changes what gets trained."""

EOT, PAD = "<|endoftext|>", "<|pad|>"
"""Special tokens, ids 0 and 1: the document separator (also the sampler's EOS) and padding."""

EXCLUDED_DIRS = frozenset({"site-packages", "test", "tests", "idle_test"})
"""Folders of the stdlib left out: installed packages, and test suites full of odd data files."""

MAX_FILE_BYTES = 200_000
"""Larger files (generated tables such as ``pydoc_data/topics.py``) are left out."""

RECORD = "corpus_lm.json"
HELDOUT = "heldout.safetensors"


@dataclass(frozen=True)
class CorpusLMConfig:
    """What to pretrain. Every field enters the cache hash (with the corpus bytes)."""

    corpus_bytes: int = 4_000_000
    """Byte budget of the corpus (train + held-out): ~1.1M BPE tokens at 4096 ids."""
    heldout_every: int = 10
    """Every ``heldout_every``-th selected file is held out (~10% of the corpus)."""
    model: TinyLMConfig = TinyLMConfig(vocab_size=CORPUS_VOCAB, hidden=128, layers=4, heads=4,
                                       kv_heads=2)
    """Model size; its ``vocab_size`` is the BPE vocabulary (1.64M parameters by default)."""
    seq_len: int = 128
    """Tokens per training window (at most ``model.max_positions``)."""
    batch_size: int = 16
    steps: int = 600
    """The budget: AdamW steps (~0.43 s each at 1 thread on a 2-core CPU: ~4.5 min, one pass
    over the training tokens)."""
    lr: float = 3e-3
    """Peak AdamW learning rate: linear warm-up, then cosine decay to a tenth of it."""
    warmup: int = 30
    weight_decay: float = 0.01
    eval_every: int = 100
    """Steps between held-out loss evaluations (the history in ``corpus_lm.json``)."""
    eval_windows: int = 64
    """Held-out windows of ``seq_len`` tokens per evaluation (the first ones of the stream)."""
    seed: int = 0

    def __post_init__(self):
        for name in ("corpus_bytes", "batch_size", "steps", "eval_every", "eval_windows"):
            check_positive_int(getattr(self, name), name)
        check_positive_int(self.heldout_every, "heldout_every", 2)
        check_positive_int(self.warmup, "warmup", 0)
        check_positive_int(self.seed, "seed", 0)
        check_positive_int(self.seq_len, "seq_len", 2)
        if self.model.vocab_size < 258 + 2:
            raise ValueError(f"model.vocab_size must hold the 256 bytes, 2 specials and some "
                             f"merges (>= 260), got {self.model.vocab_size}")
        if self.seq_len > self.model.max_positions:
            raise ValueError(f"seq_len ({self.seq_len}) must be <= model.max_positions "
                             f"({self.model.max_positions})")
        if not self.lr > 0 or self.weight_decay < 0:
            raise ValueError(f"need lr > 0 and weight_decay >= 0, got lr={self.lr}, "
                             f"weight_decay={self.weight_decay}")


def stdlib_dir() -> Path:
    """The running interpreter's standard-library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def _order(rel: str) -> str:
    return hashlib.sha256(rel.encode()).hexdigest()


def corpus_files(cfg: CorpusLMConfig, root: Path | None = None) -> tuple[list[Path], list[Path]]:
    """``(train, heldout)`` files of the corpus, deterministic for a given stdlib.

    UTF-8 ``.py`` files outside :data:`EXCLUDED_DIRS`, at most :data:`MAX_FILE_BYTES` each, in
    SHA-256 order of their relative path, taken until ``cfg.corpus_bytes``; file ``i`` is held
    out when ``i % heldout_every == 0``.
    """
    root = root or stdlib_dir()
    rels = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    chosen, total = [], 0
    for rel in sorted(rels, key=_order):
        path = root / rel
        if EXCLUDED_DIRS.intersection(Path(rel).parts[:-1]) or not path.is_file():
            continue
        size = path.stat().st_size
        if size == 0 or size > MAX_FILE_BYTES or not _is_utf8(path):
            continue
        chosen.append(path)
        total += size
        if total >= cfg.corpus_bytes:
            break
    held = chosen[::cfg.heldout_every]
    train = [p for i, p in enumerate(chosen) if i % cfg.heldout_every]
    if not train:
        raise ValueError(f"corpus_bytes = {cfg.corpus_bytes} selects {len(chosen)} file(s) of "
                         f"{root}: too few to hold one out and train on the rest; raise it")
    return train, held


def _is_utf8(path: Path) -> bool:
    try:
        path.read_bytes().decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def corpus_digest(files: list[Path], root: Path | None = None) -> str:
    """16 hex digits of SHA-256 over the files' relative paths and bytes."""
    root, h = root or stdlib_dir(), hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def config_hash(cfg: CorpusLMConfig, digest: str) -> str:
    """12 hex digits of SHA-256 over the config, the corpus digest and the cache version."""
    blob = json.dumps({"version": CORPUS_LM_CACHE_VERSION, "corpus": digest, **asdict(cfg)},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cache_root() -> Path:
    """``$TAILTHEORY_CACHE/corpus_lm``, else ``cache/corpus_lm`` of the checkout."""
    return cache_dir("corpus_lm")


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with at most ``vocab_size`` ids, trained on
    ``texts`` (ids 0, 1: :data:`EOT`, :data:`PAD`; then the 256 bytes; then merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    backend.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=EOT, eos_token=EOT,
                                   pad_token=PAD)


def encode_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    """All ``texts`` as one token stream, each followed by :data:`EOT`. Shapes: -> (N,) long."""
    eot = tokenizer.convert_tokens_to_ids(EOT)
    ids = []
    for enc in tokenizer.backend_tokenizer.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.long)


def unigram_loss(train: torch.Tensor, heldout: torch.Tensor, V: int) -> float:
    """Cross-entropy (nats) of the add-one unigram of ``train`` on ``heldout``: the no-context
    baseline the trained model must beat."""
    counts = torch.bincount(train, minlength=V).double() + 1.0
    return float(-(counts / counts.sum()).log()[heldout].mean())


def train_corpus_lm(cfg: CorpusLMConfig, progress: bool = True, threads: int = 0,
                    checkpoints: Path | None = None):
    """Tokenise the corpus and pretrain; returns ``(model, tokenizer, heldout_stream, record)``.
    ``checkpoints``: a folder to checkpoint into and continue from (:mod:`.resume`)."""
    t0 = time.perf_counter()
    root = stdlib_dir()
    train_files, held_files = corpus_files(cfg, root)
    texts = [f.read_text(encoding="utf-8") for f in train_files]
    tokenizer = train_tokenizer(texts, cfg.model.vocab_size)
    if len(tokenizer) > cfg.model.vocab_size:
        raise RuntimeError(f"BPE gave {len(tokenizer)} ids for a {cfg.model.vocab_size} vocab")
    train = encode_stream(tokenizer, texts)
    held = encode_stream(tokenizer, [f.read_text(encoding="utf-8") for f in held_files])
    windows(held, cfg.seq_len, cfg.eval_windows)          # too little held-out text fails here
    t_tok = time.perf_counter() - t0
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = tiny_lm(cfg.model, seed=cfg.seed)
    files = corpus_digest(train_files + held_files, root)
    resume = Resume(checkpoints, f"{config_hash(cfg, files)}:{digest(train, held)}",
                    progress=progress)
    with torch_threads(resolve_threads(threads, num_params(model), device)) as n_threads:
        history, t_train = pretrain(cfg, model.to(device).train(), train, held, progress, resume)
        loss = heldout_loss(model, held, cfg.seq_len, cfg.eval_windows)
    record = {"config": asdict(cfg), "hash": config_hash(cfg, files),
              "corpus": {"python": sys.version.split()[0], "stdlib": str(root), "digest": files,
                         "files_train": len(train_files), "files_heldout": len(held_files),
                         "bytes_train": sum(len(t.encode()) for t in texts),
                         "tokens_train": train.numel(), "tokens_heldout": held.numel(),
                         "vocab_used": len(tokenizer)},
              "heldout_loss": loss, "heldout_ppl": math.exp(loss),
              "unigram_loss": unigram_loss(train, held, cfg.model.vocab_size),
              "history": history, "n_params": num_params(model), "device": device,
              "weights": weights_fingerprint(model.float()), "cpu": machine(device),
              "threads": n_threads, "tokenizer_seconds": round(t_tok, 2),
              "train_seconds": round(t_train, 2),
              "seconds": round(time.perf_counter() - t0 + resume.resumed_seconds, 2),
              **({"resumed_from": resume.resumed_from} if resume.resumed_from else {})}
    return model.eval(), tokenizer, held, record


def corpus_lm(cfg: CorpusLMConfig | None = None, progress: bool = True, force: bool = False,
              threads: int = 0) -> Path:
    """The cached corpus LM of ``cfg`` (default :class:`CorpusLMConfig`), trained first if it is
    not cached. Returns its folder; open it with :func:`load_corpus_lm`. ``force`` retrains;
    ``threads``: torch CPU threads (0: one for a model this small)."""
    cfg = cfg or CorpusLMConfig()
    final = cache_root() / corpus_key(cfg)
    if (final / RECORD).exists() and not force:
        return final
    if force:
        Resume(partial_folder(final), "").clear()
    model, tokenizer, held, record = train_corpus_lm(cfg, progress, threads, partial_folder(final))
    _save(final, model, tokenizer, held, record)
    Resume(partial_folder(final), "").clear()
    return final


def corpus_key(cfg: CorpusLMConfig) -> str:
    """The cache key of ``cfg``'s corpus LM on this Python: its config and its corpus bytes."""
    if not isinstance(cfg, CorpusLMConfig):
        raise TypeError(f"cfg must be a CorpusLMConfig, got {type(cfg).__name__}")
    train_files, held_files = corpus_files(cfg)
    return config_hash(cfg, corpus_digest(train_files + held_files))


def _save(final: Path, model, tokenizer, held: torch.Tensor, record: dict) -> None:
    """Write the cache entry to a temporary folder and rename it onto ``final``."""
    from safetensors.torch import save_file

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        model.to("cpu").save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        save_file({"ids": held.to(torch.int32).contiguous()}, str(tmp / HELDOUT))
        atomic_write_json(tmp / RECORD, record)            # last: its presence marks a whole entry
        if final.exists():
            shutil.rmtree(final)
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished the same config first: keep theirs
            if not (final / RECORD).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_corpus_record(path: str | Path) -> dict:
    """The ``corpus_lm.json`` of a corpus-LM folder."""
    f = Path(path) / RECORD
    if not f.exists():
        raise FileNotFoundError(f"{path} is not a corpus-LM folder (no {RECORD})")
    return json.loads(f.read_text())


def load_corpus_lm(path: str | Path, device=None):
    """``(model, tokenizer)`` of a corpus-LM folder: the float32 model via
    :func:`tailtheory.core.models.load_lm` (safetensors only), the BPE tokenizer."""
    from transformers import PreTrainedTokenizerFast

    read_corpus_record(path)
    model = load_lm(path, device=device)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(f"{path}: tokenizer has {len(tokenizer)} ids, model "
                         f"{model.config.vocab_size}")
    return model, tokenizer


def heldout_stream(path: str | Path) -> torch.Tensor:
    """The held-out token stream of a corpus-LM folder. Shapes: -> (N,) long."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    read_corpus_record(path)
    try:
        return load_file(str(Path(path) / HELDOUT))["ids"].long()
    except SafetensorError as exc:                        # truncated or partly written
        raise ValueError(damaged_weights(Path(path) / HELDOUT, exc)) from None


def heldout_batch(path: str | Path, B: int, L: int, seed: int = 0) -> torch.Tensor:
    """``B`` distinct non-overlapping held-out windows of ``L`` tokens, chosen by ``seed``: text
    the model never trained on, for measurements. Shapes: -> (B, L) long."""
    B, L = check_positive_int(B, "B"), check_positive_int(L, "L")
    rec = read_corpus_record(path)
    if L > rec["config"]["model"]["max_positions"]:
        raise ValueError(f"L = {L} exceeds the model's max_positions "
                         f"({rec['config']['model']['max_positions']})")
    wins = windows(heldout_stream(path), L)                          # (n, L)
    if B > len(wins):
        raise ValueError(f"the held-out stream holds {len(wins)} windows of {L} tokens, "
                         f"fewer than B = {B}")
    order = torch.randperm(len(wins), generator=torch.Generator().manual_seed(seed))
    return wins[order[:B]].clone()


__all__ = ["CORPUS_VOCAB", "CorpusLMConfig", "corpus_lm", "corpus_key", "load_corpus_lm",
           "heldout_batch", "heldout_stream", "read_corpus_record", "corpus_files",
           "train_tokenizer", "encode_stream", "cache_root"]
