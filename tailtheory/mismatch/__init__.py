"""Training-inference mismatch of token log-probabilities and its (1 - p) law (claims M1-M7).

Papers: **DVP**, Li et al., *Taming the Tail: Stable LLM RL via Dynamic Vocabulary Pruning*,
arXiv 2512.23087 (v2: *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail*; M1-M6);
**TIM**, Zhong et al., *Diagnosing Training Inference Mismatch in LLM Reinforcement Learning*
(VeXact), arXiv 2605.14220 (M7, the k1/k2/k3 estimators, the correction weights).

Notation: the trainer computes logits `z` (probabilities `p`), the inference engine `z + delta`
(probabilities `p'`); every numerical source (rounding, kernels, KV cache, reduction order) is
folded into `delta`. Per-token mismatch `Delta_k = log p'_k - log p_k` (inference minus trainer;
TIM's `delta_t = log pi_train - log pi_rollout` is `-Delta`). `eps` bounds `|delta|`; `sigma`
is the scale of i.i.d. Gaussian `delta`.

Claims:

- **M1** (exact) `Delta_k = delta_k - log sum_j p_j e^{delta_j}`; adding a constant to every
  `delta_j` leaves `Delta` unchanged.
- **M2** (first order) `Delta_k = sum_{j != k} p_j (delta_k - delta_j) + O(||delta||^2)`, hence
  `|Delta_k| <= 2 eps (1 - p_k) + O(eps^2)` when `||delta||_inf <= eps`; the remainder is truly
  second order (slope 2 on a log-log plot) and is needed.
- **M3** (exact) If `max_j |delta_j - delta_k| <= 2 eps` then
  `|Delta_k| <= log(1 + (1 - p_k)(e^{2 eps} - 1)) <= (1 - p_k)(e^{2 eps} - 1)`, and a search finds
  cases at the bound.
- **M4** (exact) `E_{k ~ p'}[Delta_k] = KL(p' || p) >= 0`: on the tokens the engine samples, its
  log-prob exceeds the trainer's on average.
- **M5** (second order, i.i.d. `delta_j ~ N(0, sigma^2)`)
  `E[Delta_k | k sampled] ~ sigma^2 [(1 - p_k)^2 + sum_{j != k} p_j^2] - sigma^2 (1 - sum_j p_j^2) / 2`:
  positive and largest on tail tokens, near 0 on the head token. Accurate for small `sigma`
  only (the assumption of its HOLDS-UNDER verdict).
- **M6** `log pi_train(y) / pi_infer(y) = -sum_t Delta_t`; its mean drifts linearly in the number
  of sampled tail tokens, not like `sqrt(T)`.
- **M7** On a real small transformer, bfloat16 / float16 / float8 inference copies against the
  float32 trainer, and KV-cache decoding against a full forward, give a measured `|Delta|`
  against `p` envelope with the `(1 - p)` shape, under M3's bound. No noise is injected.

Where each claim lives (modules of `tailtheory/mismatch/`, tests in `tests/mismatch/`):

| id | exact quantity | bound | check | figure | tests |
|---|---|---|---|---|---|
| M1 | `logprob.logprob_mismatch`, `logprob.mismatch_identity`, `symbolic.m1_residual` | - | `claims._m1` | - | `test_logprob.py`, `test_symbolic.py` |
| M2 | `logprob.first_order_mismatch`, `symbolic.m2_residual`, `symbolic.m2_second_order` | `logprob.mismatch_bound` | `claims._m2` | - | `test_logprob.py`, `test_symbolic.py` |
| M3 | `logprob.logprob_mismatch`, `logprob.worst_case_mismatch` | `logprob.mismatch_bound` | `claims._m3` | `figures.plot_mismatch_vs_p` | `test_logprob.py` |
| M4 | `logprob.sampled_mismatch_bias`, `logprob.kl_divergence` | - | `claims._m4` | `figures.plot_selection_bias` (data `selection.selection_bias_table`) | `test_logprob.py`, `test_selection.py` |
| M5 | `selection.sampled_bias_monte_carlo` | `selection.sampled_bias_second_order` (the formula) | `claims._m5` | `figures.plot_selection_bias` | `test_selection.py` |
| M6 | `accumulation.sequence_log_ratio`, `accumulation.simulate_sequences`, `accumulation.accumulation_regression` | - | `claims._m6` | `figures.plot_accumulation` (data `accumulation.accumulation_table`) | `test_accumulation.py` |
| M7 | `real.paired_logits`, `real.mismatch_envelope`, `tailtheory.engine.rollout.copies.inference_copy` | `logprob.mismatch_bound` | `claims._m7` | `figures.plot_mismatch_vs_p` (data `real.mismatch_tokens`) | `test_real.py`, `tests/engine/rollout/test_copies.py` |

The per-token KL estimators `logprob.k1`, `logprob.k2`, `logprob.k3` (TIM's, used by TRM's T12
and the engine's mismatch metrics) are importable from here too (they live in
`tailtheory.core.estimators`); what the mismatch does to GRPO training, and
TIM's corrections of it, are the `tim` section's (`tailtheory/tim/`, claims V1-V6).

Modules, one line each:

- ``logprob``: the per-token mismatch of log-probabilities: exact, to first order, its bound
  and its bias on sampled tokens (M1-M4); the k1/k2/k3 estimators importable from here.
- ``symbolic``: symbolic derivations (sympy) of the mismatch identities M1 and M2.
- ``selection``: the selection bias of the tokens the inference engine samples (M4, M5).
- ``accumulation``: the token mismatch accumulated along sequences (M6).
- ``real``: the real mismatch on a small transformer: bf16 / fp16 / fp8 copies and KV-cache
  decoding against the float32 trainer (M7).
- ``chunked``: M7's real mismatch on any checkpoint, one chunk of positions at a time.
- ``batch_shape``: batch-shape mismatch of any model: the same sequences scored alone and
  inside padded batches (V8; on the ladder's rungs: ``tailtheory.ladder.mismatch``).
- ``claims``: the checks of M1-M7.
- ``figures``: the figures of M3-M7, each with the data behind it, and notebook 01's explorer.
- ``registrations``: everything the section registers, in one place (the catalog imports it).
"""
