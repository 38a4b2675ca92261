"""Tests of tailtheory.core.forward: the trainer's forward and its padding helpers."""

import torch

from tailtheory.core.forward import full_forward, left_pad, position_ids
from tailtheory.core.models import tiny_lm

ATOL_F32 = 1e-5
"""Float32 agreement of the same row computed padded and alone (masked keys still enter the
softmax's reduction as exact zeros, but matmul blocking may differ)."""


def test_position_ids_count_from_the_first_real_token():
    attn = torch.tensor([[False, False, True, True], [True, True, True, True]])
    assert position_ids(attn).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


def test_full_forward_of_a_left_padded_row_is_the_row_alone():
    """Left padding with the mask and positions of position_ids computes what the row computes
    alone; without a mask the forward is the model's plain call."""
    model = tiny_lm(vocab_size=64, hidden=32, layers=2, seed=0)
    prompts = [[5, 6, 7, 8], [9, 10]]
    ids, attn, _ = left_pad(prompts, pad_id=0, vocab_size=64)
    with torch.no_grad():
        z = full_forward(model, ids, attn)                                      # (B, P, V)
        for i, p in enumerate(prompts):
            alone = full_forward(model, torch.tensor([p]))[0]
            torch.testing.assert_close(z[i, -len(p):], alone, atol=ATOL_F32, rtol=0)
        plain = model(input_ids=ids, use_cache=False).logits
    assert torch.equal(full_forward(model, ids).detach(), plain)
