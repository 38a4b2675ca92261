"""Token windows of real text for the probes of any checkpoint, read with the model's own tokenizer.

The text is the source every machine has offline: the held-out files of the corpus LM's corpus
(:func:`tailtheory.engine.start.corpus_lm.corpus_files`: the running interpreter's standard library,
in its fixed order, every tenth file), so for the corpus LM it is text it never trained on. The
files are encoded one after another with the checkpoint's tokenizer (no special tokens; its EOS,
when it has one, between files) until the stream holds :data:`STREAM_WINDOWS` windows' worth of
tokens, cut into non-overlapping windows of ``L`` tokens, and ``B`` of them are chosen by
``seed``. A different Python version has a different standard library, hence other windows.
The tokenizer is the checkpoint's own (``tailtheory.core.models.load_tokenizer``).

Shapes: ids (B, L) long.
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.engine.start.corpus_lm import CorpusLMConfig, corpus_files

STREAM_WINDOWS = 4
"""The stream is read until it holds this many times ``B`` windows (or the files run out), so
the ``B`` windows chosen by ``seed`` come from a choice of at least ``4 B``."""


def _stream(tokenizer, n_tokens: int) -> torch.Tensor:
    """The held-out corpus files encoded by ``tokenizer`` until ``n_tokens``. -> (N,) long."""
    _, files = corpus_files(CorpusLMConfig())
    eos = getattr(tokenizer, "eos_token_id", None)
    ids: list[int] = []
    for f in files:
        ids.extend(tokenizer(f.read_text(encoding="utf-8"), add_special_tokens=False,
                             verbose=False)["input_ids"])
        if eos is not None:
            ids.append(int(eos))
        if len(ids) >= n_tokens:
            break
    return torch.tensor(ids, dtype=torch.long)


def text_windows(tokenizer, B: int, L: int, seed: int = 0, vocab_size: int | None = None):
    """``B`` distinct non-overlapping windows of ``L`` tokens of standard-library source, encoded
    by ``tokenizer`` and chosen by ``seed`` (module docstring). ``vocab_size``: the model's
    vocabulary, which every id must lie below.

    Shapes: -> (B, L) long, on the CPU.
    """
    B, L = check_positive_int(B, "batch"), check_positive_int(L, "length", 2)
    seed = check_positive_int(seed, "seed", 0)
    stream = _stream(tokenizer, STREAM_WINDOWS * B * L)
    n = stream.numel() // L
    if n < B:
        raise ValueError(f"the standard library's held-out source gives {stream.numel()} tokens "
                         f"with this tokenizer: fewer than {B} windows of {L}; use a smaller "
                         f"--batch or --length")
    wins = stream[:n * L].view(n, L)
    if vocab_size is not None and int(wins.max()) >= vocab_size:
        raise ValueError(f"the tokenizer gives id {int(wins.max())}, outside the model's "
                         f"vocabulary of {vocab_size} rows: tokenizer and model do not match")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return wins[order[:B]].clone()


__all__ = ["STREAM_WINDOWS", "text_windows"]
