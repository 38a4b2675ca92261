"""Low-probability tokens dominate the update: LOPTI's two remedies and their opposites (L1-L9).

Paper: **LOPTI**, Yang et al., *Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs*,
arXiv 2505.12929 (code: the authors' verl fork AR-Lopti). The opposite claims: **RLVR-DIR**, *On
the Direction of RLVR Updates*, arXiv 2603.22117 (L7); **80/20**, Wang et al., *Beyond the 80/20
Rule*, arXiv 2506.01939 (L8); **RAND-20**, a 2026 study of random token subsets, arXiv
2605.07660 (L9).

Notation: `pi_old` is the probability of the sampled token under the policy that generated it
(detached), `A` its advantage, `mask (B, T)` the response tokens, `alpha` the reweighting
strength, `eta` the probability threshold of the two passes. Bins of `pi_old`: the fixed
intervals `[0, .25], (.25, .5], (.5, .75], (.75, 1]`.

Claims (L1, L4, L5 measured by one SGD step on GRPO batches of the long-response task's warm
start; L2, L3, L6 by GRPO training runs from that warm start, several seeds each):

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
- **L6** (headline) On Knights and Knaves, GRPO -> +AR+Lopti raised held-out accuracy 0.39 ->
  0.57 (Qwen2.5-3B); at toy scale only the ordering can carry over.

The field's opposite claims (GRPO training runs, each method against GRPO; rules fixed in the
ledger before their runs): on the ``matched`` recipe, three seeds an arm (Welch's t), where the
low-probability tokens are mostly free; on the ``decide`` recipe, five seeds, once a recipe where
they decide learns (none has: the ledger's design search):

- **L7** Upweighting, the opposite of L2: `A <- (1 + c - c pi_old) A` with `c = 0.2` (the
  published 7B scripts of arXiv 2603.22117, whose baseline is DAPO; here on GRPO) trains better
  than GRPO (L2's rule).
- **L8** The policy gradient on the top 20% of each step's response tokens by the entropy of
  `pi_old` over the full vocabulary is no worse than GRPO on final held-out accuracy (margin
  0.05); the loss keeps normalising by all response tokens.
- **L9** The control: a random 20% of the tokens (seeded by run and step), normalised the same
  way, is no worse than GRPO (margin 0.05); arXiv 2605.07660 reports 97.8% of full training's
  final score.

Where each claim lives (modules of `tailtheory/lopti/` unless named in full, tests in
`tests/lopti/`):

| id | exact quantity | bound | check | figure | tests |
|---|---|---|---|---|---|
| L1 | `onestep.token_grad_norms`, `tailtheory.softmax.scores.score_norm` | `tailtheory.softmax.scores.score_norm_bounds` | `claims._l1` | `figures.plot_figure1` | `test_onestep.py`, `test_measurement.py`, `tests/softmax/test_scores.py` |
| L2 | `reweight.advantage_reweight`, `training.lopti_arms` | - | `claims._l2` | `training.plot_curves` | `test_reweight.py`, `test_training.py` |
| L3 | `reweight.lopti_passes`, `training.lopti_arms` | - | `claims._l3` | `training.plot_curves` | `test_reweight.py`, `test_training.py` |
| L4 | `probes.bin_grad_norms`, `probes.prob_change_by_bin`, `onestep.update_probes` | - | `claims._l4` | `figures.plot_figure1` | `test_probes.py`, `test_onestep.py`, `test_measurement.py` |
| L5 | `probes.rise_fraction`, `probes.sequential_prob_change`, `onestep.update_probes` | - | `claims._l5` | `figures.plot_figure3` | `test_probes.py`, `test_onestep.py`, `test_measurement.py` |
| L6 | `training.lopti_arms`, `tailtheory.experiments.run_numbers.run_summary` | - | `claims._l6` | `training.plot_curves` | `test_training.py` |
| L7 | `opposite.upweight_advantage`, `training.opposite_arms`, `moved.moved_table` | - | `claims._l7` | `moved.plot_moved` | `test_opposite.py`, `test_training.py`, `test_moved.py` |
| L8 | `opposite.top_entropy_mask`, `training.non_inferiority`, `training.opposite_matched_evidence` | - | `claims._l8` | `moved.plot_moved` | `test_opposite.py`, `test_training.py`, `test_moved.py` |
| L9 | `opposite.random_token_mask`, `training.non_inferiority`, `training.opposite_matched_evidence` | - | `claims._l9` | `moved.plot_moved` | `test_opposite.py`, `test_training.py`, `test_moved.py` |

Modules, one line each:

- ``reweight``: LOPTI's two changes to the update: Advantage Reweighting and the two-pass
  schedule (L2, L3).
- ``methods``: the engine's methods ``ar``, ``lopti`` and ``lopti_reversed`` (the ablation);
  ``upweight``, ``top_entropy`` and ``random_tokens`` (L7-L9).
- ``opposite``: the opposite claims' changes to the update: upweighting, the top-entropy and the
  random token masks (L7-L9).
- ``probes``: how one policy-gradient step treats tokens by probability: per-bin gradient
  norms and probability changes (L4, L5).
- ``onestep``: one SGD step on one GRPO batch of the warm start: what Figures 1 and 3 draw (L1,
  L4, L5).
- ``measurement``: the stored one-step measurement of Figures 1 and 3: which batches, stored
  where, pooled per seed, judged how (L1, L4, L5).
- ``learn_probes``: Figures 1 and 3 on the learning testbed, from its warm start and from a
  policy half-way through GRPO (L4, L5).
- ``text_probe``: the one-step probes on any checkpoint, on a batch of text (L1, L4, L5).
- ``training``: LOPTI in training (L2, L3, L6): GRPO, AR, Lopti, AR+Lopti and Lopti reversed,
  five seeds each; the opposite claims' studies (L7-L9), on ``matched`` and ``decide``.
- ``moved``: which tokens each method moves: the change of log-probability from the warm start
  to each arm's final policy on ``matched``, per bin, token role and decisive call (L7-L9).
- ``claims``: the checks of L1-L9.
- ``figures``: Figures 1 and 3 from the stored one-step measurement.
- ``decisive/``: decisiveness: which of a policy's low-probability tokens decide the answer.
- ``registrations``: everything the section registers, in one place (the catalog imports it).
"""
