"""The checks of TIM's claims (``tailtheory.tim.claims``): each one, run on the quick profile,
measures the verdict the ledger ``paper_repro.md`` records; V2's store names the corpus LM it
measured."""

from types import SimpleNamespace

import pytest

from ledger_checks import assert_ledger_verdict
from provenance_check import check_named, tiny_model
from tailtheory.core.measurements import RESULTS_ENV
from tailtheory.core.provenance import machine, weights_fingerprint
from tailtheory.docs import section_claims
from tailtheory.tim import claims as c


@pytest.mark.parametrize("claim", section_claims("tim"), ids=lambda c: c.id)
def test_quick_check_gives_the_ledger_verdict(claim):
    assert_ledger_verdict(claim)


V2_FAKE = {"bf16/mean_abs": 0.01, "bf16/max_abs": 0.2, "bf16/tokens": 10}
"""V2's numbers of a model that shows it (small mean, heavy maximum)."""


def test_v2_store_names_the_corpus_lm(tmp_path, monkeypatch):
    """V2's store on the corpus LM names the corpus LM and the machine (the rollouts stubbed);
    the verdict's numbers leave both out."""
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    corpus = tiny_model(2)
    monkeypatch.setattr(c, "corpus_lm", lambda cfg: tmp_path)
    monkeypatch.setattr(c, "load_corpus_lm", lambda path, device=None: (
        corpus, SimpleNamespace(convert_tokens_to_ids=lambda toks: [1, 2])))
    monkeypatch.setattr(c, "_v2_numbers", lambda batches: dict(V2_FAKE))
    check_named(c._v2_corpus("thorough"), weights_fingerprint(corpus), machine())
    ev = c._v2("quick")                                  # reads the store just made
    assert set(ev.numbers) == {"random/seen", "corpus/seen", "decoder",
                               *(f"{m}/{k}" for m in ("random", "corpus") for k in V2_FAKE)}
