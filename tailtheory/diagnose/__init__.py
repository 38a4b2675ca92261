"""Diagnose a real run: the token-tail claims measured on per-token dumps (``tailtheory diagnose``).

Papers: **DVP**, Li et al., *Taming the Tail: Stable LLM RL via Dynamic Vocabulary Pruning*,
arXiv 2512.23087; **TRM**, Li et al., *Trust Region Masking for Long-Horizon LLM Reinforcement
Learning*, arXiv 2512.23075; **TIM**, Zhong et al., *Diagnosing Training Inference Mismatch in
LLM Reinforcement Learning*, arXiv 2605.14220.

Notation: per sampled token, ``log_rho = log pi_train - log pi_roll`` (TIM),
``Delta = -log_rho = log pi_roll - log pi_train`` (DVP's sign: inference minus trainer),
``p = pi_train`` of the token; a *tail* token has ``p < 0.1``, a *head* token ``p > 0.9``.

What a dump can and cannot show: with only the sampled token's two log-probs, ``eps`` of M3 (the
half-range of the logit perturbation) is unknown; each token gives a lower bound on it
(:func:`aggregate.implied_eps`, the inverse of ``mismatch_bound``), and the envelope is drawn
at its quantiles. TRM's exact filter needs both logit sets; a dump gives the k2 / k3 filters.
DVP's kept set needs the top-k (or full) log-probs.

Sections of the report and the claims they rest on (``docs/claims.md``):

| section | claims | quantity (toolkit function) | module |
|---|---|---|---|
| ``|Delta|`` against p with M3's envelope | M3, M7 | ``k1`` (Delta), ``mismatch_bound``, ``implied_eps`` | ``sections.envelope`` |
| mean signed Delta by p: the tail bias | M4, M5 | ``k1`` | ``sections.tail_bias`` |
| sequence log-ratio against tail tokens | M6 | ``sequence_log_ratio``, ``accumulation_regression`` | ``sections.accumulation`` |
| TRM acceptance against threshold, length | T12 | ``k2``, ``k3``, ``trm_mask``, ``acceptance_prob`` | ``sections.trm`` |
| what DVP at several rho would prune | P1, P2, P4 | ``safe_vocab_mask`` (min-p), ``pruned_mass`` | ``sections.dvp`` |
| k1 / k3 over steps | TIM's monitors (V2, V5) | ``k1``, ``k3`` | ``sections.steps`` |
| each step's mean k3 against a bar (``--certify``) | TIM's k3; prime-rl's PR 2672 | ``k3`` | ``sections.certify`` |
| k3, mean ``|log rho|`` and reward across a resume (``--resume-at``) | TIM's k3; slime issue 1695 | ``k3`` | ``sections.resume`` |
| sequence log-ratio = mean per-token log-ratio x length | M6, V4 | ``tis_weight``, ``mis_keep``, ... | ``sections.seq_ratio`` |
| the framework's logged ratio: sum, mean, sign | M6, V4 | ``aggregation_check`` | ``sections.logged_ratio`` |
| the run's mean k3 on the dose-response register | V6 | ``tailtheory.tim.dose.register_table`` | ``sections.register`` |

Modules, one line each (``tests/diagnose/`` mirrors them, ``test_<module>.py`` per module):

- ``formats/``: one reader per input format, one file each, listed once in ``formats.TABLE``.
- ``read``: format detection, folders, checks and batches: it iterates the formats' table.
- ``columns``: Arrow columns of a dump as checked numpy arrays.
- ``aggregate``: the streaming sums every section shares (``Accumulator``, running their folds).
- ``quantum``: how a dump stores its log-probs, and the most storing moves a ``Delta``.
- ``sections/``: one record per report section, one file each, listed once in ``SECTIONS``.
- ``build``: the diagnosis, section by section; ``summary.json``'s keys, from the sections.
- ``report``: figures, HTML, the all-or-nothing output folder.
- ``cli``: the command and ``run_diagnose``.

The placement on the model-size ladder is the ladder's (:mod:`tailtheory.ladder.place`): the
register section reads it; the ladder never imports ``diagnose``.
"""
