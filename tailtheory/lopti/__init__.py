"""Low-probability tokens dominate the update, and LOPTI's two remedies (claims L1-L5).

Paper: **LOPTI**, Yang et al., *Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs*,
arXiv 2505.12929 (code: the authors' verl fork AR-Lopti).

Notation: `pi_old` is the probability of the sampled token under the policy that generated it
(detached), `A` its advantage, `mask (B, T)` the response tokens, `alpha` the reweighting
strength, `eta` the probability threshold of the two passes. Bins of `pi_old`: the fixed
intervals `[0, .25], (.25, .5], (.5, .75], (.75, 1]`.

Claims (none registered as a check yet; the GRPO engine runs them in training):

- **L1** The gradient magnitude of a token scales with `1 - pi_old`: the softmax wedge S4 at the
  logit layer and S5 through the network.
- **L2** Advantage Reweighting: `A <- (alpha pi_old + 1 - alpha) A` per token, `pi_old` detached,
  for both signs of `A`; `alpha = 0` is plain GRPO.
- **L3** Lopti: split the response tokens by `pi_old < eta`; update on the low group first, then on
  the high group, on the same batch, without recomputing `pi_old` between the passes; each pass
  normalises by all response tokens.
- **L4** (Figure 1) One SGD step on a GRPO batch: the parameter-gradient norm when only one bin's
  advantages are kept decreases with the bin; updating only the lowest bin moves every bin
  almost like updating all, updating only the highest moves little.
- **L5** (Figure 3) Among tokens with `A > 0`, the fraction whose probability rose after the
  update, per bin: about 0.5 in the top bin for plain GRPO, higher with L2 and L3.

Where each claim lives (modules of `tailtheory/lopti/` unless named in full, tests in
`tests/lopti/`):

| id | exact quantity | bound | check | figure | tests |
|---|---|---|---|---|---|
| L1 | `tailtheory.softmax.scores.score_norm`, `tailtheory.softmax.wedge.activation_wedge` | `tailtheory.softmax.scores.score_norm_bounds` | S4, S5 | S4, S5 | `tests/softmax/test_scores.py`, `tests/softmax/test_wedge.py` |
| L2 | `reweight.advantage_reweight` | - | - | - | `test_reweight.py` |
| L3 | `reweight.lopti_passes` | - | - | - | `test_reweight.py` |
| L4 | `probes.bin_grad_norms`, `probes.prob_change_by_bin` | - | - | - | `test_probes.py` |
| L5 | `probes.rise_fraction`, `probes.sequential_prob_change` | - | - | - | `test_probes.py` |
"""
