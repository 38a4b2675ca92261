"""Training-inference mismatch in GRPO training: zero-mismatch and real paths, TIM's remedies, and a dose-response of our own (claims V1-V6).

Paper: **TIM**, Zhong et al., *Diagnosing Training Inference Mismatch in LLM Reinforcement
Learning* (VeXact), arXiv 2605.14220.

Notation: `rho_t = pi_train(y_t | c_t) / pi_roll(y_t | c_t)`, the ratio of the trainer's
probability of a sampled token to the rollout engine's; `pi_old` is the policy of the PPO ratio
`r_t = pi_new / pi_old`, obtained by *recompute* (a trainer forward) or *bypass* (the rollout's
log-probs). Per-token mismatch KL estimators `k1 = -log rho`, `k3 = rho - 1 - log rho`
(`tailtheory.mismatch.logprob`).

Claims:

- **V1** (zero mismatch) The `exact` rollout path reports log-probs bitwise equal to the
  trainer's; the k3 mismatch KL is exactly 0 in every step.
- **V2** (a real mismatch source) bf16 / fp16 inference copies against the float32 trainer, and
  KV-cache decoding against a full forward: per-batch mean `|delta_t|` small, maximum heavy.
- **V3** Recompute vs bypass `pi_old`: the advantage-weighted contribution `C(r) = -(r - 1) A`,
  split by the sign of `A`, coincides for both at zero mismatch and skews by sign under mismatch.
- **V4** (headline) Mismatch alone can destabilise training: runs identical but for the rollout
  path, then the remedies, each with its source's semantics: token TIS `min(rho, C)`, sequence
  TIS `min(prod rho, C)`, masked IS (weight `prod rho` inside a band, 0 outside), geometric
  rejection (band on the geometric mean of `rho`), IcePop (weight `rho` inside a token band, 0
  outside), TRM, DVP.
- **V5** The k1 / k3 mismatch KL can stay flat while reward degrades (a monitoring blind spot).
- **V6** (dose-response; ours, beyond the papers) On a recipe where GRPO learns, a controlled
  rollout mismatch of growing size (Gaussian logit noise at scale sigma, DVP's model of mismatch,
  or relative weight noise re-drawn at every sync) has a threshold `k3*` in the measured
  per-token k3: below it no harm is measurable, above it held-out accuracy degrades; the
  remedies move it or not; the real paths sit on the same axis at their measured k3.

Where each claim lives (modules of `tailtheory/tim/`, tests in `tests/tim/`):

| id | exact quantity | bound | check | figure | tests |
|---|---|---|---|---|---|
| V1 | `tailtheory.engine.rollout.engine.sampled_logprobs` | - | `claims._v1` | - | `tests/engine/rollout/test_engine.py` |
| V2 | `tailtheory.engine.rollout.engine.sampled_logprobs`, `tailtheory.engine.rollout.copies.inference_copy` | - | `claims._v2` | - | `tests/engine/rollout/test_engine.py`, `tests/engine/rollout/test_copies.py` |
| V3 | `training.learn_arms`, `training.v3_evidence` | - | `claims._v3` | `figures.plot_contribution` | `test_training.py` |
| V4 | `dose.dose_arms`, `dose.real_path_evidence`, `corrections.tis_weight` | - | `claims._v4` | `dose_figures.plot_dose` | `test_dose.py`, `test_corrections.py` |
| V5 | `dose.real_path_evidence` | - | `claims._v5` | `dose_figures.plot_dose` | `test_dose.py` |
| V6 | `dose.dose_arms`, `dose.dose_table`, `dose.threshold`, `dose.v6_evidence`, `tailtheory.engine.rollout.noise` | - | `claims._v6` | `dose_figures.plot_dose` | `test_dose.py`, `test_dose_figures.py`, `tests/engine/rollout/test_noise.py` |

TIM's corrections are weights on `rho` (`corrections.tis_weight`, `corrections.seq_tis_weight`,
`corrections.mis_weight`, `corrections.icepop_weight`, and the rejections with weight 1
`corrections.mis_keep`, `corrections.geo_keep`, `corrections.icepop_keep`), registered as GRPO
methods of the engine by `methods`. Every training claim runs on the learning testbed (the
`learn` recipe): V3's runs (`training`, study `mismatch_learn`) are notebook 06's; V4, V5 and V6
read the dose study (`dose`, study `mismatch_dose`: its real-path arms for V4 and V5), notebook
07's. V3's, V4's and V5's first verdicts, measured where GRPO did not learn, are recorded in
`results/superseded/verdicts.json` and never recomputed.

V7 (ours, after Qi et al., arXiv 2510.26788: fp16 rollouts remove the mismatch bf16 rollouts
create) is measured along the model-size ladder: `precision` (one step: the bf16 / fp16 k3
ratio per rung, `tailtheory ladder precision`) and `precision_training` (the study
`precision_matched`: fp16 rollouts uncorrected against bf16 with token TIS and with MIS on the
`matched` recipe, a non-inferiority rule); `tailtheory verify` prints both after its table
(`tailtheory.ladder.effects`). V6 along the ladder is the ladder's (`tailtheory.ladder.dose`, study
`dose_ladder`): per rung, the logit-noise sigma of each k3 of its grid (`tailtheory ladder
calibrate`).

Modules, one line each:

- ``corrections``: TIM's corrections as pure formulas on ``rho``: importance weights and
  rejections (V4).
- ``methods``: the corrections as the engine's methods (``tis``, ``seq_tis``, ``mis``,
  ``seq_reject``, ``geo_reject``, ``icepop``, ``token_reject``).
- ``training``: mismatch in training (V3): GRPO runs that differ only in the rollout path, under
  both ways of getting ``pi_old``.
- ``rho_sign``: V3's sign-free formalisation, reported beside its verdict: do the ratios ``rho``
  differ between tokens of positive and negative advantage?
- ``dose``: the mismatch dose-response (V6; V4 and V5 from its real-path arms): how much
  rollout mismatch GRPO survives, where the remedies move the threshold, the register.
- ``length_acceptance``: TRM's acceptance by response length from a run's token dump (the
  numbers T14 reads).
- ``precision``: FP16 against BF16 (V7): the same sampled tokens scored in float32 and in 16 bits.
- ``precision_training``: FP16 against BF16 in training, V7's training half (study
  ``precision_matched``).
- ``claims``: the checks of V1-V6.
- ``figures``: V3's table and figure.
- ``dose_figures``: the figures and tables of the dose-response (V4-V6).
- ``registrations``: everything the section registers, in one place (the catalog imports it).
"""
