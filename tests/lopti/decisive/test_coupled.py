"""The coupled sampler of ``tailtheory/lopti/decisive/coupled.py``: the torch hash equals its
definition in Python integers, its marginal is the policy's (chi-square), the branches share
noise by (word, piece, id) whatever their positions, and the branch rollouts use it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from tailtheory.engine.tasks.task import get_task
from tailtheory.lopti.decisive import coupled as cp
from tailtheory.lopti.decisive.branches import branch_values, sampler_config
from tests.lopti.decisive.scripted import ScriptedPolicy

P_MIN = 0.01
"""A chi-square p-value below this refuses the marginal (one fixed seed: the test is
deterministic; a right sampler passes it with probability 0.99 over seeds)."""

N_KEYS = 20_000
"""Keys drawn for the chi-square test."""


def test_the_torch_hash_is_splitmix64_on_python_integers():
    xs = [0, 1, 2**62 + 12345, -1, -(2**63), 2**63 - 1, 987654321]
    got = cp.splitmix64(torch.tensor(xs, dtype=torch.int64)).tolist()
    assert [g & cp.MASK64 for g in got] == [cp.splitmix64_ref(x & cp.MASK64) for x in xs]
    keys = [(3, 5, 0, 7), (3, -1, 4, 0), (2**40, 2, 1, 9)]
    h = [cp.key_hash(*(torch.tensor(k[i]) for i in range(4))).item() & cp.MASK64 for k in keys]
    assert h == [cp.key_hash_ref(*k) for k in keys]


def _marginal_p_value(draw, logits, n):
    counts = np.bincount(draw(n), minlength=len(logits))
    expected = torch.softmax(logits.double(), -1).numpy() * n
    return stats.chisquare(counts, expected).pvalue


def _coupled(logits):
    def draw(n):
        seed = cp.key_hash(torch.arange(n), 11)           # n distinct keys
        zero = torch.zeros(n, dtype=torch.int64)
        noise = cp.gumbel(seed, zero + 3, zero, len(logits))
        return cp.coupled_draw(torch.log_softmax(logits, -1).expand(n, -1), noise).numpy()
    return draw


def test_the_coupled_marginal_is_the_policy_s():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -3.0, 0.5, 1.5, -0.5])
    assert _marginal_p_value(_coupled(logits), logits, N_KEYS) > P_MIN
    # the check can fail: a sampler at temperature 0.8 (a slightly sharper law) is refused
    assert _marginal_p_value(_coupled(logits / 0.8), logits, N_KEYS) < P_MIN


def test_the_same_word_and_piece_draw_the_same_token_at_any_position():
    V = 50
    logits = torch.randn(V, generator=torch.Generator().manual_seed(0))
    starts = torch.rand(V, generator=torch.Generator().manual_seed(1)) < 0.5
    seed = cp.key_hash(torch.tensor([5, 5, 6]), 0)
    S, m = torch.tensor([4, 4, 4]), torch.tensor([2, 2, 2])
    noise = cp.candidate_noise(seed, S, m, starts)
    assert torch.equal(noise[0], noise[1]) and not torch.equal(noise[0], noise[2])
    # a branch whose synonym took one more piece: after it, the next word meets the same noise
    # (id 2 continues a word: "1 2" is one word of two pieces, "1 2 2" one of three)
    a = cp.prefix_words([1, 2, 3], torch.tensor([True, True, False, True]))
    b = cp.prefix_words([1, 2, 2, 3], torch.tensor([True, True, False, True]))
    assert a == b == (2, 1)
    na = cp.candidate_noise(seed[:1], torch.tensor([a[0]]), torch.tensor([a[1]]), starts)
    nb = cp.candidate_noise(seed[:1], torch.tensor([b[0]]), torch.tensor([b[1]]), starts)
    assert torch.equal(na, nb)
    # a candidate that starts a word has the same noise whatever the pieces of the word before
    nc = cp.candidate_noise(seed[:1], torch.tensor([a[0]]), torch.tensor([a[1] + 2]), starts)
    assert torch.equal(na[0, starts], nc[0, starts]) and not torch.equal(na, nc)
    lp = torch.log_softmax(logits, -1)[None]
    assert cp.coupled_draw(lp, na).item() == cp.coupled_draw(lp, nb).item()


def test_noise_is_deterministic_and_word_states_advance():
    seed = cp.key_hash(torch.tensor([1, 2]), 9)
    one = cp.gumbel(seed, torch.tensor([0, 1]), torch.tensor([0, 0]), 30)
    assert torch.equal(one, cp.gumbel(seed, torch.tensor([0, 1]), torch.tensor([0, 0]), 30))
    starts = torch.tensor([True, False])
    S, m = cp.advance_words(torch.tensor([2, 2]), torch.tensor([1, 1]), torch.tensor([0, 1]),
                            starts)
    assert S.tolist() == [3, 2] and m.tolist() == [1, 2]


def test_word_starts_of_the_word_level_tokenizer_are_every_id():
    task = get_task("kk", n_people=2)
    starts = cp.word_starts(task)
    assert starts.shape == (task.vocab_size,) and bool(starts.all())


def test_branch_rollouts_take_the_sampler_and_the_stored_config_is_unchanged():
    task = get_task("kk", n_people=3)
    problems = task.problems(2, seed=3)
    policy = ScriptedPolicy(task, problems, 0.3)
    responses = [policy.answers[tuple(p.prompt_ids)] + [task.eos_id] for p in problems]
    pos = [(0, 0), (1, 1)]
    a = branch_values(policy, task, problems, responses, pos, K=16, cap=5, seed=2)
    b = branch_values(policy, task, problems, responses, pos, K=16, cap=5, seed=2)
    old = branch_values(policy, task, problems, responses, pos, K=16, cap=5, seed=2,
                        sampler="inverse_cdf")
    assert np.array_equal(a["rewards_with"], b["rewards_with"])             # deterministic
    assert not np.array_equal(a["rewards_with"], old["rewards_with"])
    assert sampler_config("inverse_cdf") == {} and sampler_config("coupled") == {
        "sampler": "coupled"}
    with pytest.raises(ValueError, match="unknown sampler 'x'; valid: coupled, inverse_cdf"):
        branch_values(policy, task, problems, responses, pos, K=4, cap=5, sampler="x")


def test_word_starts_of_a_byte_level_bpe_agree_with_the_words_of_the_roles():
    """The word a token falls in, counted by :func:`word_starts`, is the one
    ``token_words`` (the roles' reading of the decoded text) gives it."""
    from tailtheory.lopti.decisive.probe import token_words
    from tests.checkpoints import bpe_tokenizer

    tok = bpe_tokenizer(1024)
    task = get_task("kk_prose", seed=0, tokenizer=tok, vocab_size=len(tok), n_people=2)
    starts = cp.word_starts(task)
    assert 0 < int(starts.sum()) < len(starts)                  # pieces that continue exist
    ids = task.encode(" " + " ".join(task.words[:12]))
    assert len(ids) > 12                                        # some words take two pieces
    word = np.cumsum(starts[ids].numpy()) - 1
    assert word.tolist() == token_words(task, ids)
