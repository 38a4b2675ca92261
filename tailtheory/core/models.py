"""Tiny Hugging Face causal LMs built from a config, and loading of local checkpoints.

Nothing is downloaded: ``tiny_lm`` builds a randomly initialised Qwen2-, Llama- or
Qwen3-architecture model from a ``transformers`` config; ``load_lm`` reads any causal LM saved
in Hugging Face format at a local path, ``load_tokenizer`` the tokenizer saved beside it, and
``checkpoint_fingerprint`` names what such a folder holds (weights, config and tokenizer).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch

ARCHS = ("qwen2", "llama", "qwen3")
"""``TinyLMConfig.arch`` values: the ``transformers`` model type built."""

TORCH_DEFAULT = torch.get_num_threads()
"""torch's own intra-op thread count when this module was imported (one per core, or
``OMP_NUM_THREADS``): what large models keep (:mod:`tailtheory.engine.threads`). A notebook's
set-up (:func:`~tailtheory.core.display.setup_notebook`) imports it before lowering the count."""

ATTENTION = "eager"
"""Attention kernel of built and loaded models alike (a saved config does not keep it, and
``sdpa`` differs from ``eager`` by ~1e-8: a reloaded model must compute what it saved)."""


@dataclass(frozen=True)
class TinyLMConfig:
    """Size of a tiny causal LM. The default is ~0.4M parameters; ~30M at hidden 512, 8 layers."""

    vocab_size: int = 512
    """Vocabulary; much larger than a task's so unused tokens form a real low-probability tail."""
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int | None = None
    """MLP width; defaults to 2 x hidden."""
    max_positions: int = 256
    arch: str = "qwen2"
    """``qwen2``, ``llama`` or ``qwen3`` (q/k norms; ``head_dim`` = hidden / heads here, no
    biases). Rope scaling, another ``head_dim`` or biases: build the ``transformers`` config
    directly (fields added here would change the hashes that ``asdict`` of this config enters)."""
    tie_embeddings: bool = False


def hf_config(cfg: TinyLMConfig):
    """The ``transformers`` config for ``cfg`` (eager attention: deterministic on CPU)."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    if cfg.arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {cfg.arch!r}")
    if cfg.vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {cfg.vocab_size}")
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads:
        raise ValueError(f"hidden ({cfg.hidden}) must divide by heads ({cfg.heads}) and heads "
                         f"by kv_heads ({cfg.kv_heads})")
    kw = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden,
              intermediate_size=cfg.intermediate or 2 * cfg.hidden,
              num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
              num_key_value_heads=cfg.kv_heads, max_position_embeddings=cfg.max_positions,
              tie_word_embeddings=cfg.tie_embeddings, attn_implementation=ATTENTION)
    if cfg.arch == "qwen3":  # its own default head_dim is 128, whatever the width
        return Qwen3Config(**kw, head_dim=cfg.hidden // cfg.heads)
    return (Qwen2Config if cfg.arch == "qwen2" else LlamaConfig)(**kw)


def tiny_lm(cfg: TinyLMConfig | None = None, seed: int = 0, **overrides):
    """A randomly initialised causal LM in float32, eval mode, built from ``cfg``.

    Keyword overrides replace fields of the default config: ``tiny_lm(vocab_size=2048)``.
    """
    from transformers import AutoModelForCausalLM

    cfg = TinyLMConfig(**{**asdict(cfg or TinyLMConfig()), **overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(cfg), dtype=torch.float32)
    return model.eval()


def num_params(model) -> int:
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())


def lm_config(path: str | Path):
    """The ``transformers`` config of the model saved at a local ``path``, read without its
    weights; the errors of :func:`load_lm` for a missing path or a folder without a config."""
    from transformers import AutoConfig

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint path {path} does not exist")
    if not (path / "config.json").exists():
        raise ValueError(f"{path} is not a Hugging Face checkpoint (no config.json)")
    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except (ValueError, OSError, KeyError) as exc:
        raise ValueError(f"{path} does not hold a causal LM: {exc}") from exc


def skeleton_lm(config):
    """The causal LM of ``config`` with its weights on the ``meta`` device: its modules and
    config, no memory and no weights read (what a model is, before it is loaded)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def load_lm(path: str | Path, device: str | torch.device | None = None,
            dtype: torch.dtype = torch.float32):
    """Load a causal LM saved with ``save_pretrained`` at a local ``path``.

    Raises ``FileNotFoundError`` when the path does not exist and ``ValueError`` when it does not
    hold a causal LM. ``device`` defaults to CUDA when available, else CPU. Attention is
    ``ATTENTION`` (eager), as in :func:`tiny_lm`, so a reloaded model computes bitwise what it
    computed when saved.
    """
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    config = lm_config(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, config=config, local_files_only=True,
                                                     dtype=dtype, attn_implementation=ATTENTION,
                                                     use_safetensors=True)  # no pickled weights
    except SafetensorError as exc:                 # truncated or partly written weights
        raise ValueError(damaged_weights(path, exc)) from None
    except (ValueError, OSError, KeyError) as exc:
        raise ValueError(f"{path} does not hold a causal LM: {exc}") from exc
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval()


GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")
"""``tokenizer_class`` of a tokenizer saved from a ``tokenizers`` object (this toolkit's word-level
tokenizer, a BPE trained by hand): its ``tokenizer.json`` is the whole pipeline. ``AutoTokenizer``
in ``transformers`` 5 maps such a folder to the model type's class (``Qwen2Tokenizer`` beside a
Qwen2 model), which rebuilds Qwen's byte-level BPE from the vocabulary and so changes every id of
a word-level tokenizer; :func:`load_tokenizer` reads those folders with the generic class."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                   "merges.txt", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json")
"""Files a saved tokenizer may consist of (``save_pretrained`` writes some of them)."""


def load_tokenizer(path: str | Path):
    """The tokenizer saved beside a model at a local ``path`` (``save_pretrained``), read with
    ``local_files_only=True`` and never with remote code.

    A folder saved from a ``tokenizers`` object (:data:`GENERIC_TOKENIZERS`) is read exactly as
    saved; any other through ``AutoTokenizer``. Raises ``FileNotFoundError`` when ``path`` does
    not exist and ``ValueError`` (one line, naming the fix) when it holds no tokenizer or one that
    cannot be read.
    """
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint path {path} does not exist")
    if not any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json",
                                             "tokenizer.model", "vocab.json")):
        raise ValueError(f"{path} holds no tokenizer (no tokenizer.json or "
                         f"tokenizer_config.json): the tasks speak text, so the model's own "
                         f"tokenizer is needed; save its tokenizer beside it: "
                         f"tokenizer.save_pretrained({str(path)!r})")
    try:
        config = path / "tokenizer_config.json"
        kind = json.loads(config.read_text()).get("tokenizer_class") if config.exists() else None
        if kind in GENERIC_TOKENIZERS and (path / "tokenizer.json").exists():
            return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
        return AutoTokenizer.from_pretrained(path, local_files_only=True,
                                             trust_remote_code=False)
    except (ValueError, OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"cannot read the tokenizer in {path} ({why}); save it there again: "
                         f"tokenizer.save_pretrained({str(path)!r})") from None


def checkpoint_fingerprint(path: str | Path) -> str:
    """16 hex digits of SHA-256 over the files that make a saved model what it is: its
    ``config.json``, its ``generation_config.json`` (the stop ids a rollout ends at), its
    ``*.safetensors`` weights and their ``*.safetensors.index.json``, and its tokenizer's files
    (:data:`TOKENIZER_FILES`), by name and content. Equal fingerprints: the same weights, stop
    ids and tokenizer (a run's identity when it starts from a folder; the run cache keys on
    it)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint path {path} does not exist")
    names = ["config.json", "generation_config.json", *TOKENIZER_FILES]
    files = sorted({*(path / n for n in names if (path / n).is_file()),
                    *path.glob("*.safetensors"), *path.glob("*.safetensors.index.json")})
    stats = tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _files_fingerprint(stats)


@lru_cache(maxsize=64)
def _files_fingerprint(stats: tuple) -> str:
    """The hash of :func:`checkpoint_fingerprint`, once per files of the same size and time
    (a large model's weights are read once per process, however many keys name them)."""
    import hashlib

    h = hashlib.sha256()
    for name, size, _ in stats:
        h.update(f"{Path(name).name}|{size}|".encode())
        with open(name, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def damaged_weights(path: str | Path, exc: BaseException) -> str:
    """The one-line error of a safetensors file (or a folder's weights) that cannot be read,
    truncated or partly written: the file, what is wrong and the way out."""
    from safetensors import SafetensorError, safe_open

    path, bad = Path(path), []
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    for f in files:
        try:
            with safe_open(str(f), framework="pt"):
                pass
        except (SafetensorError, OSError):
            bad.append(f)
    what = ", ".join(str(f) for f in bad or files) or f"the weights in {path}"
    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return (f"{what}: damaged safetensors file, truncated or partly written ({why}); nothing "
            f"was loaded: save or copy it there again (a model: save_pretrained), or, for a "
            f"folder tailtheory made in its cache (a warm start under cache/sft), delete the "
            f"folder and it is made again")


def cache_keyword(model) -> str:
    """The keyword a causal LM's ``forward`` takes its KV cache by: ``cache`` (transformers >=
    5.24, which deprecates the old name with a printed warning) or ``past_key_values``."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out):
    """The KV cache a causal LM's forward returned: its ``cache`` field (transformers >= 5.24) or
    its ``past_key_values`` (earlier); a ``ValueError`` if it returned none (``use_cache`` off)."""
    from collections.abc import Mapping

    for name in ("cache", "past_key_values"):
        # a ModelOutput is a mapping: look its keys up (reading the old attribute on 5.24 prints
        # the deprecation); any other output object by attribute
        found = out.get(name) if isinstance(out, Mapping) else getattr(out, name, None)
        if found is not None:
            return found
    raise ValueError("the model returned no KV cache (call it with use_cache=True)")
