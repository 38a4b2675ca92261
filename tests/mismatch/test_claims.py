"""The checks of the training-inference mismatch's claims (``tailtheory.mismatch.claims``): each one, run on the quick profile,
measures the verdict the ledger ``paper_repro.md`` records; M7's stores name the models they
measured."""

import pytest
import torch

from ledger_checks import assert_ledger_verdict
from provenance_check import check_named, tiny_model, two_policies
from tailtheory.core.measurements import RESULTS_ENV
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.docs import section_claims
from tailtheory.mismatch import claims as c
from tailtheory.mismatch import real as rm
from tailtheory.mismatch.real import M7_PATHS


@pytest.mark.parametrize("claim", section_claims("mismatch"), ids=lambda c: c.id)
def test_quick_check_gives_the_ledger_verdict(claim):
    assert_ledger_verdict(claim)


M7_FAKE = {f"{path}/{k}": v for path in M7_PATHS for k, v in (
    ("envelope_slope", 1.0), ("head_mean_abs", 1e-3), ("tail_mean_abs", 0.1))}
"""M7's numbers of a model that shows the envelope on every path (what the verdict reads)."""


def test_m7_stores_name_their_models(tmp_path, monkeypatch):
    """M7's store on the corpus LM names the corpus LM and the machine; the matched recipe's,
    each policy's start (the measurement stubbed); the verdict's numbers leave both out."""
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    corpus = tiny_model(2)
    warm, _ = two_policies(monkeypatch, c.lp)
    monkeypatch.setattr(c, "corpus_lm", lambda cfg: tmp_path)
    monkeypatch.setattr(c, "load_corpus_lm", lambda path, device=None: (corpus, None))
    monkeypatch.setattr(c, "heldout_batch", lambda path, B, T, seed=0: None)
    monkeypatch.setattr(c, "policy_windows", lambda model, task, B, T: None)
    monkeypatch.setattr(c, "_m7_numbers", lambda model, ids: dict(M7_FAKE))
    check_named(c._m7_corpus("thorough"), weights_fingerprint(corpus), machine())
    matched = c._m7_matched("thorough")
    for entry in matched.values():
        check_named(entry, weights_fingerprint(warm), machine())
    ev = c._m7_evidence(matched, "the matched recipe's policies")
    assert ev.numbers == c._m7_evidence({k: M7_FAKE for k in matched}, "").numbers


def test_m7_slope_of_bitwise_equal_logits_is_nan_not_an_error():
    """M7's slope needs a logarithm of each bin's mean |Delta|: logits equal to themselves
    give NaN (the bins still counted); the same model's bf16 copy gives a slope near 1."""
    model = rm.m7_model(512, hidden=64)
    z, zi = rm.paired_logits(model, rm.random_input_ids(512, 1, 64, seed=0), "bf16")
    slope, bins = c.envelope_slope(z, z)
    assert bins >= 3 and slope != slope
    slope, bins = c.envelope_slope(z, zi)
    assert bins >= 3 and 0.5 < slope < 1.5
    q = torch.tensor([1e-5] * 5 + [1e-3] * 5 + [0.5] * 5, dtype=torch.float64)  # three bins
    slope, bins = c.binned_envelope_slope(torch.zeros(15, dtype=torch.float64), q)
    assert bins == 3 and slope != slope
