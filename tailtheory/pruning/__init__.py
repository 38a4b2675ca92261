"""Dynamic vocabulary pruning: a safe token set, its exact cost and what it buys (claims P1-P5).

Paper: **DVP**, Li et al., *Taming the Tail: Stable LLM RL via Dynamic Vocabulary Pruning*,
arXiv 2512.23087 (v2: *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*).

Notation: logits `z` of a state `s`, `pi = softmax(z)`, a safe set `S(s)` of kept tokens, the
pruned policy `pi~(a|s) = pi(a|s) 1[a in S] / pi(S|s)` (in logits: `-inf` outside `S` before the
log-softmax), the pruned mass `m(s) = 1 - pi(S|s)`. The rule for `S` is a parameter: min-p
relative `pi(a) >= rho max_b pi(b)` (the default, `rho = 1e-4`), top-p (smallest set of mass
`>= 1 - eta`) or absolute (`pi(a) >= tau`). `R_max` bounds the reward, `T` the horizon.

Claims:

- **P1** (exact) `TV(pi~, pi) = m` and `KL(pi~ || pi) = -log(1 - m)`.
- **P2** (trajectory) `TV(P~, P) <= sum_t E_{pi~}[m(s_t)]`, so
  `|J(pi~) - J(pi)| <= R_max sum_t E[m(s_t)] <= R_max T max_s m(s)`; under min-p,
  `m(s) <= (V - |S(s)|) rho max_b pi(b|s)`. Checked by exact enumeration.
- **P3** (exact) A sampler that truncates and renormalises over `S` while the trainer uses the
  full vocabulary shifts every token's log-ratio by exactly `log pi(S|s)`: pruning must use the
  same `S` on both sides.
- **P4** (the trade) Sweeping `rho` from 1e-8 to 1e-1, DVP's argument predicts a knee: small
  `rho` removes most of the biased mismatch of sampled tokens at negligible pruned mass.
- **P5** (in training) GRPO with bf16 rollouts, with and without pruning on both sides at
  `rho` from 1e-8 to 1e-2: the P2 bound of the pruned mass along the sampled trajectories stays
  small while training is at least as stable as without pruning.

Where each claim lives (modules of `tailtheory/pruning/`, tests in `tests/pruning/`):

| id | exact quantity | bound | check | figure | tests |
|---|---|---|---|---|---|
| P1 | `vocab.pruned_tv`, `vocab.pruned_kl`, `vocab.pruned_mass` | - | `claims._p1` | - | `test_vocab.py` |
| P2 | `trajectory.trajectory_tv`, `trajectory.return_gap` | `trajectory.trajectory_bias_bound`, `vocab.min_p_mass_bound` | `claims._p2` | - | `test_trajectory.py`, `test_vocab.py` |
| P3 | `vocab.truncation_log_ratio`, `vocab.truncation_bias`, `tailtheory.core.safeset.dvp_keep` | - | `claims._p3` | - | `test_vocab.py`, `tests/core/test_safeset.py` |
| P5 | `training.bias_bound`, `training.p5_arms`, `training.p5_evidence`, `training.STUDY` (`dvp_learn`), `training.restore_numbers` | `trajectory.trajectory_bias_bound` | `claims._p5` | `training.plot_p5` | `test_training.py` |
| P4 | `sweep.pruning_sweep`, `sweep.remaining_mismatch`, `sweep.pruning_knee`, `trained_tails.measure_p4_trained`, `trained_tails.mass_shares`, `matched_tails.measure_matched` | `trajectory.trajectory_bias_bound` | `claims._p4` | `figures.plot_pruning_tradeoff`, `figures.plot_trained_sweep`, `figures.plot_mass_shares` | `test_sweep.py`, `test_trained_tails.py`, `test_figures.py` |

Pruning in training (P5) runs through the GRPO engine's `dvp` method (`methods.dvp`, on the safe
set of `tailtheory.core.safeset`, which the engine shares), with the kept set of
`tailtheory.core.safeset.dvp_keep` on both sides (`training.p5_arms`: GRPO with bf16 rollouts
against DVP at each rho; `training.bias_bound`: the P2 bound of one step, pruned mass per token
times tokens per response).

Modules, one line each:

- ``vocab``: the safe token set and its exact cost: pruned mass, TV, KL, the truncation's
  log-ratio shift (P1-P3; the rules themselves live in ``tailtheory.core.safeset``).
- ``trajectory``: the pruned policy over whole trajectories, by exact enumeration (P2).
- ``sweep``: the trade between pruned mass and the mismatch left after pruning (P4).
- ``trained_tails``: P4's trade measured on trained models, with the mismatch of sampled tokens.
- ``matched_tails``: P4's trade on the papers' regime, the ``matched`` recipe's policies.
- ``chunked``: P4's trade on any checkpoint, one chunk of positions at a time.
- ``methods``: the engine's ``dvp`` method, the sampler's kept vocabulary used on both sides.
- ``training``: DVP in training (P5): GRPO with bf16 rollouts, with and without pruning.
- ``claims``: the checks of P1-P5.
- ``figures``: the figures of P4, on the random model and on the stored trained-model sweep.
- ``registrations``: everything the section registers, in one place (the catalog imports it).
"""
