"""The coupled sampler of ``tailtheory/lopti/decisive/coupled.py``: the torch hash equals its
definition in Python integers, its marginal is the policy's (chi-square), the branches share
noise by (word, piece, id) whatever their positions, and the branch rollouts use it."""

from __future__ import annotations

import types

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


class _SynonymPolicy:
    """A free synonym of one piece (id 1) or two (ids 2, 3), then five answer words (ids 4, 5,
    each at 1/2), then EOS (id 0); the reward reads only the answer words, so the synonym's
    ``D`` is 0 exactly. A decoder :func:`branch_values` takes (prompt: id 4)."""

    V = 6

    def start(self, ids, attn, T):
        policy = self

        class State:
            rows = None

            def __init__(self):
                self.seqs = [ids[b][attn[b]].tolist()[1:] for b in range(len(ids))]
                self.logits = torch.stack([policy.logits(s) for s in self.seqs])

            def advance(self, tokens, alive):
                for b, s in enumerate(self.seqs):
                    s.append(int(tokens[b]))
                self.logits = torch.stack([policy.logits(s) for s in self.seqs])
        return State()

    def logits(self, resp):
        z = torch.full((self.V,), float("-inf"))
        answered = sum(1 for v in resp if v in (4, 5))
        if not resp:
            z[1] = z[2] = 0.0
        elif resp[-1] == 2:
            z[3] = 0.0
        elif answered < 5:
            z[4] = z[5] = 0.0
        else:
            z[0] = 0.0
        return z


class _SynonymTask:
    vocab_size, pad_id, stop_ids = 6, 0, (0,)

    def reward(self, problem, seq):
        return types.SimpleNamespace(total=float(sum(1 for v in seq if v == 4) >= 3))


def test_coupling_survives_a_synonym_that_shifts_positions(monkeypatch):
    """The point of the coupling: after a synonym of one piece against one of two, the coupled
    branches draw the same answer (the free token's ``se`` is 0); the inverse-CDF pairing, shifted
    by one position, does not."""
    from tailtheory.lopti.decisive import branches

    starts = torch.tensor([True, True, True, False, True, True])     # id 3: a word's 2nd piece
    monkeypatch.setattr(branches, "word_starts", lambda task: starts)
    problems = [types.SimpleNamespace(prompt_ids=[4])]
    responses = [[1, 4, 5, 4, 4, 5, 0]]
    kw = dict(K=32, cap=10, seed=3)
    new = branch_values(_SynonymPolicy(), _SynonymTask(), problems, responses, [(0, 0)], **kw)
    old = branch_values(_SynonymPolicy(), _SynonymTask(), problems, responses, [(0, 0)],
                        sampler="inverse_cdf", **kw)
    assert new["p"][0] == pytest.approx(0.5)
    assert np.array_equal(new["rewards_with"], new["rewards_without"]) and new["D_se"][0] == 0
    assert new["rewards_with"].std() > 0                   # the answers themselves vary
    assert old["D_se"][0] > 0.03


def test_drawing_in_row_blocks_equals_drawing_at_once(monkeypatch):
    from tailtheory.core import stats

    V, A = 40, 9
    g = torch.Generator().manual_seed(4)
    logp = torch.log_softmax(torch.randn(A, V, generator=g), -1)
    starts = torch.rand(V, generator=g) < 0.6
    seed, S, m = cp.key_hash(torch.arange(A), 1), torch.arange(A) % 3, torch.arange(A) % 2
    whole = cp.coupled_draw(logp, cp.candidate_noise(seed, S, m, starts))
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", 2 * V)              # blocks of two rows
    assert torch.equal(cp.draw_rows(logp, seed, S, m, starts), whole)
