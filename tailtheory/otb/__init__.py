"""The optimal token baseline: what it minimises, what it does not, and finite groups (O1-O6).

Paper: **OTB**, Li et al., *The Optimal Token Baseline: Variance Reduction for Long-Horizon
LLM-RL*, arXiv 2602.07078.

Notation: outcome reward `R`, rewards-to-go `G_t` (`= R` at every alive position), alive mask
`m_t`, sampled-token probability `pi_t`. Per-token energy `w_t = 1 - 2 pi_t + sum_v pi_t(v)^2`
(S2 at the sampled token), realised energy `W_t = sum_{j<=t} m_j w_j`. For a group of `N`
responses to one prompt, at each position: `B*_t = sum_i G^i_t W^i_t / (sum_i W^i_t + 1e-8)`,
advantage `A^i_t = (G^i_t - B*_t) m^i_t`, no std normalisation; a group of one gets `A = G`.
Scores `s_t = d log pi(y_t|c_t) / d theta`, prefix scores `S_<=t = sum_{j<=t} s_j`. Policies are
tabular so that every expectation is an exact sum over all sequences.

Claims:

- **O1** (exact) `w_t` equals the squared norm of the score of a tabular policy (one logit vector
  per prefix).
- **O2** (derived) With true prefix norms, OTB exactly minimises
  `J(B) = sum_t E[||S_<=t||^2 (G_t - B_t)^2 m_t]`; with the proxy `W_t` it does so under
  cross-token orthogonality of the scores (exact for tabular policies, false with parameters
  shared across contexts): the assumption of its HOLDS-UNDER verdict.
- **O3** (derived) The variance of `g_B = sum_t s_t (G_t - B_t) m_t` is minimised over
  position-dependent baselines by `B = M^-1 c` (`M_tu = E[<s_t, s_u> m_t m_u]`,
  `c_t = E[<s_t, sum_u s_u G_u> m_t]`), not by OTB; `V(OTB) / V(M^-1 c)` is measured.
- **O4** OTB beats the group-mean baseline: `V(OTB) / V(mean) < 1` (our formalisation; measured
  with and without EOS, over random policies and by adversarial search). Without EOS it is a
  theorem for tabular policies: OTB's population baseline is the energy-weighted running mean of
  the per-position optimal baselines, which beats every constant (`claims.running_mean_gap`).
- **O5** (exact) `G^i - B* = (W^-i / (W^i + W^-i)) (G^i - B^-i)` with `B^-i` the leave-one-out
  weighted baseline: OTB is a shrunk, energy-weighted RLOO.
- **O6** (headline) "N = 4 with OTB matches N = 32 without", tested twice: (a) the cosine and
  relative MSE of the group gradient estimate against the exact gradient for GRPO, RLOO and OTB
  at N = 2..32; (b) in GRPO training on long responses, OTB at N = 4 against GRPO at N = 4 and
  N = 16, reward and held-out accuracy against tokens consumed.

Where each claim lives (modules of `tailtheory/otb/`, tests in `tests/otb/`):

| id | exact quantity | bound | check | figure | tests |
|---|---|---|---|---|---|
| O1 | `baselines.token_energy`, `variance.autograd_sq_norms`, `variance.score_gram` | - | `claims.check_o1` | - | `test_baselines.py`, `test_variance.py` |
| O2 | `variance.prefix_surrogate`, `variance.weighted_baseline`, `variance.fd_gradient`, `variance.surrogate_argmin_residuals` | - | `claims.check_o2` | `figures.plot_proxy_vs_true` (data `experiments.proxy_table`) | `test_variance.py` |
| O3 | `variance.baseline_variance`, `variance.optimal_baseline`, `variance.variance_quadratic`, `experiments.variance_table` | - | `claims.check_o3` | `figures.plot_baseline_variance` | `test_variance.py` |
| O4 | `variance.population_baselines`, `variance.adversarial_otb_ratio`, `experiments.variance_table`, `claims.o4_typicality` | `claims.running_mean_gap` | `claims.check_o4` | `figures.plot_baseline_variance` | `test_variance.py`, `test_training.py` |
| O5 | `baselines.optimal_token_baseline`, `baselines.otb_leave_one_out`, `baselines.self_inclusion_residual` | - | `claims.check_o5` | - | `test_baselines.py` |
| O6 | `variance.group_study`, `variance.matching_group_size`, `experiments.group_table`, `training.o6_arms`, `training.o6_training_evidence`, `training.STUDY` (`otb_learn`) | - | `claims.check_o6` | `figures.plot_group_study`, `figures.plot_o6` | `test_variance.py`, `test_experiments.py`, `test_training.py` |

The group advantages GRPO, Dr. GRPO and RLOO are the engine's (`tailtheory.engine.advantages`,
read by its `grpo` and `dr_grpo` losses); the engine's `otb` method is `methods.otb`, an
advantage-stage method of the engine's method registry that calls
`baselines.optimal_token_baseline`.

Modules, one line each:

- ``baselines``: token-level advantages: the optimal token baseline, its leave-one-out form
  and the group baselines it is compared with (O1, O5).
- ``variance``: the exact variance of token-level policy-gradient estimators on tabular
  policies, the optimal baseline and the finite-group study (O1-O4, O6).
- ``experiments``: the tables shared by the checks, the figures and notebook 03.
- ``methods``: the engine's ``otb`` method, the optimal token baseline as the advantage stage.
- ``training``: OTB in training (O6, part b): OTB at N = 4 against GRPO at N = 4 and a large N.
- ``claims``: the checks of O1-O6.
- ``figures``: the figures of O2, O3, O4 and O6, and notebook 03's explorer.
- ``registrations``: everything the section registers, in one place (the catalog imports it).
"""
