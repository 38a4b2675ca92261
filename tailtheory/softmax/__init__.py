"""Softmax facts: the score of a sampled token and its (1 - p) wedge (claims S1-S5).

Papers: **LOPTI**, Yang et al., *Do Not Let Low-Probability Tokens Over-Dominate in RL for
LLMs*, arXiv 2505.12929 (Prop. 4.2: S1, S4, S5); **OTB**, Li et al., *The Optimal Token
Baseline: Variance Reduction for Long-Horizon LLM-RL*, arXiv 2602.07078 (its logit-gradient
proxy: S2, S3).

Notation: vocabulary size `V`, logits `z` of shape `(..., V)`, `p = softmax(z)`, sampled token
`k`, one-hot `e_k`, `LSE` the logsumexp, `u` the unit roundoff of a floating dtype. For one
layer of a network: activations `a` (`H` wide) and the Jacobian `J = dz/da` of shape `(V, H)`.

Claims:

- **S1** (exact) The score of the sampled token with respect to the logits is
  `d log p_k / dz = e_k - p`.
- **S2** (exact) Its squared norm has the closed form `||e_k - p||^2 = 1 - 2 p_k + sum_j p_j^2`
  (OTB's logit-gradient proxy, no `V`-vector needed beyond `sum_j p_j^2`).
- **S3** (exact, with measured rounding) `sum_j p_j^2 = exp(LSE(2z) - 2 LSE(z))`, from the
  logits alone. In float64, float32 and bfloat16 it stays within `8 u (1 + ln V)` of the truth
  only when `z` is max-centred first (the assumption of its HOLDS-UNDER verdict); the raw formula
  with large logit offsets does not.
- **S4** `sqrt(V/(V-1)) (1 - p_k) <= ||e_k - p|| <= sqrt(2) (1 - p_k) <= sqrt(2 (1 - p_k))`.
  Both ends are attained: the upper when the rest of the mass sits on one other token, the lower
  when it is spread evenly.
- **S5** Through any layer: `||grad_a log p_k|| <= ||J||_2 sqrt(2) (1 - p_k)`, and
  `>= sigma_min(J) sqrt(V/(V-1)) (1 - p_k)` when `J` has full row rank. On a tiny transformer
  every token of every layer falls inside its wedge; the fitted constants are reported per layer.

Where each claim lives (modules of `tailtheory/softmax/`, tests in `tests/softmax/`):

| id | exact quantity | bound | check | figure | tests |
|---|---|---|---|---|---|
| S1 | `scores.score`, `symbolic.s1_residual` | - | `claims.check_s1` | - | `test_scores.py`, `test_symbolic.py` |
| S2 | `scores.score_sq_norm`, `symbolic.s2_residual` | - | `claims.check_s2` | - | `test_scores.py`, `test_symbolic.py` |
| S3 | `scores.sum_p_squared`, `scores.s3_errors` | `scores.lse_budget` | `claims.check_s3` | - | `test_scores.py` |
| S4 | `scores.score_norm`, `scores.s4_slacks`, `scores.score_norm_witness_ratio` | `scores.score_norm_bounds`, `scores.score_norm_bound_weak` | `claims.check_s4` | `figures.plot_score_norm` (data `scores.score_norm_table`) | `test_scores.py` |
| S5 | `wedge.activation_wedge`, `wedge.wedge_summary` | `scores.score_norm_bounds` scaled by `J` | `claims.check_s5` | `figures.plot_layer_wedge` (data `wedge.layer_wedge_table`) | `test_wedge.py` |

Modules, one line each:

- ``scores``: the score of a sampled token at the logit layer and its (1 - p) wedge (S1-S4).
- ``wedge``: the same wedge through the network, for the activations of every layer (S5).
- ``symbolic``: symbolic derivations (sympy) of the exact identities S1 and S2.
- ``claims``: the checks of S1-S5.
- ``figures``: the figures of S4 and S5, each with the data behind it.
- ``registrations``: everything the section registers, in one place (the catalog imports it).
"""
