"""Trust regions over long horizons: exact errors, eight bounds, sequence masking (claims T1-T14).

Paper: **TRM**, Li et al., *Trust Region Masking for Long-Horizon LLM Reinforcement Learning*,
arXiv 2512.23075.

Notation: prompt `x`, response `y = (y_1..y_T)`, context `c_t = (x, y_<t)`, reward `R in [0, 1]`,
`J(pi) = E_{y~pi}[R]`, `rho_t = pi_theta(y_t|c_t) / pi_roll(y_t|c_t)`. Surrogate
`L' = E_roll[R sum_t (rho_t - 1)]` and `Error = J(pi_theta) - J(pi_roll) - L'`. Token divergences
in the direction rollout || train: `D_TV(c)`, `D_KL(c) = KL(pi_roll(.|c) || pi_theta(.|c))`;
`eps = max D_TV`, `delta = max D_KL` over contexts reachable under `pi_roll`;
`D^seq_KL = sum_t E_{c_t}[D_KL(c_t)]`, `D^seq_TV = TV(P^roll, P^theta)`,
`Dbar_t = E_{c_t}[D_TV(c_t)]`. Policies are tabular (one logit row per context) so that every
quantity is an exact sum over all sequences.

Claims:

- **T1-T8** Bounds on `|Error|`: classical `2T(T-1) eps^2` (T1); Pinsker-marginal with KL (T2) and
  TV (T3); Mixed with KL `4T min(1, sqrt(delta/2)) min(1, sqrt(D^seq_KL/2))` (T4) and TV
  `4T min(1, eps) min(1, D^seq_TV)` (T5); Coupling `4 min(1, eps) sum_t min(1, (t-1) eps)` (T6);
  Adaptive `4 sum_t Dbar_t min(1, (T-t) eps, sqrt((T-t) delta/2))` (T7); Unified, the minimum of
  T2-T7 (T8). Each holds for every pair and every reward (checked at the worst-case reward).
- **T9** (exact) `Error = -Delta` with `Delta = E_roll[R sum_t (rho_t - 1)(1 - prod_{j>t} rho_j)]`.
- **T10** (derived) Since per-step Q-values lie in `[0, 1]`, every bound above still holds when
  halved, and the halved bounds are attained.
- **T11** No function `f` gives `delta <= f(D^seq_KL)`: a rare context with KL 1 keeps `delta = 1`
  while `D^seq_KL -> 0`.
- **T12** (masking) TRM keeps a sequence iff `max_t D_KL(c_t) <= delta_max` (or the average, or
  both); from sampled tokens only, `k2 = (log rho)^2 / 2` serves the max filter and
  `k3 = rho - 1 - log rho` (unbiased for `D_KL`) the average. Rejected sequences add zero and the
  loss divides by all sequences. With an i.i.d. per-token violation rate `q`,
  `P(accept) = (1 - q)^T`.
- **T13** (scaling) The exact `|Error|` grows with `T`; its measured exponent is reported next to
  the bounds' `T^2`, `T^1.5` and `T`.
- **T14** (masking in training) In GRPO runs with a real mismatch (bf16 / fp8 rollouts), the
  fraction of sequences TRM keeps per response length follows `(1 - q)^T` with the measured
  per-token violation rate `q`, and masking whole sequences keeps training stable where PPO's
  token clipping alone does not.

Where each claim lives (modules of `tailtheory/trm/`, tests in `tests/trm/`):

| id | exact quantity | bound | check | figure | tests |
|---|---|---|---|---|---|
| T1 | `exact.error`, `exact.exact_report` | `bounds.classical_bound` | `claims._bound_check` | `figures.plot_bounds_vs_T` | `test_bounds.py` |
| T2 | `exact.error` | `bounds.pm_kl_bound` | `claims._bound_check` | `figures.plot_bounds_vs_T` | `test_bounds.py` |
| T3 | `exact.error` | `bounds.pm_tv_bound` | `claims._bound_check` | `figures.plot_bounds_vs_T` | `test_bounds.py` |
| T4 | `exact.error` | `bounds.mix_kl_bound` | `claims._bound_check` | `figures.plot_bounds_vs_T` | `test_bounds.py` |
| T5 | `exact.error` | `bounds.mix_tv_bound` | `claims._bound_check` | `figures.plot_bounds_vs_T` | `test_bounds.py` |
| T6 | `exact.error` | `bounds.coupling_bound` | `claims._bound_check` | `figures.plot_bounds_vs_T` | `test_bounds.py` |
| T7 | `exact.error` | `bounds.adaptive_bound` | `claims._bound_check` | `figures.plot_bounds_vs_T` | `test_bounds.py` |
| T8 | `exact.error`, `experiments.sweep_table`, `experiments.slack_table` | `bounds.unified_bound`, `bounds.trust_region_bounds` | `claims._bound_check` | `figures.plot_error_vs_bounds` | `test_bounds.py` |
| T9 | `exact.error`, `exact.delta_t9` | - | `claims._t9` | - | `test_bounds.py` |
| T10 | `exact.error`, `experiments.witness_ratio` | `bounds.trust_region_bounds` (halved) | `claims._t10` | `figures.plot_error_vs_bounds` | `test_bounds.py` |
| T11 | `experiments.rare_context_pair`, `experiments.t11_family` | - | `claims._t11` | - | `test_bounds.py` |
| T12 | `mask.trm_mask`, `mask.trm_masked_loss`, `exact.k3_expectation`, `experiments.acceptance_table` | `mask.acceptance_prob` | `claims._t12` | `figures.plot_acceptance` | `test_bounds.py` |
| T13 | `experiments.error_vs_T`, `experiments.growth_exponent` | `bounds.trust_region_bounds` | `claims._t13` | `figures.plot_error_vs_bounds` | `test_bounds.py` |
| T14 | `tailtheory.tim.length_acceptance.t14_token_numbers`, `training.length_acceptance_table`, `training.t14_evidence` | `mask.acceptance_prob` | `claims._t14` | `figures.plot_length_acceptance` | `test_training.py` |

Masking in training (T14) runs through the GRPO engine's `trm` method (`methods.trm`, with the
filter `mask.trm_mask`, which lives in `tailtheory.core.estimators` with k2 and k3) on the
runs of `tailtheory.tim.training` (notebook 06; stored measurement).

Modules, one line each:

- ``exact``: the exact quantities of TRM's error analysis, by enumeration of a tabular pair.
- ``bounds``: the bounds on the surrogate error (T1-T8, T10).
- ``experiments``: exact errors of tabular pairs next to every bound: the tables the checks and
  notebook 02 share.
- ``mask``: Trust Region Masking, a sequence kept only when every step stayed inside the trust
  region (T12).
- ``methods``: the engine's ``trm`` method, trust region masking as a correction.
- ``training``: TRM masking in training (T14): acceptance against response length, and whether
  masking whole sequences keeps training stable where PPO's token clipping alone does not.
- ``claims``: the checks of T1-T14.
- ``figures``: the figures of T1-T8, T12, T13 and T14, and notebook 02's explorer.
- ``registrations``: everything the section registers, in one place (the catalog imports it).
"""
