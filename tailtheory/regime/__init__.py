"""The regime of the training claims: how far the testbed is from each paper, quantity by quantity.

Papers: LOPTI (Yang et al., arXiv 2505.12929), DVP (Li et al., arXiv 2512.23087), TRM (Li et al.,
arXiv 2512.23075), OTB (Li et al., arXiv 2602.07078), TIM (Zhong et al., arXiv 2605.14220).

A training verdict (L2-L6, P5, T14, O6 (b), V3-V6) or a trained-model one (L1, P4, M7, V2) is
measured on the testbed's policies. Each claim is driven by dimensionless quantities of those
policies: the share of sampled response tokens per ``pi_old`` bin and the mean ``|A|`` there
(LOPTI), the pruned mass per token and per response at each ``rho`` (DVP), the mismatch ``k3``
per token and per response (TIM; times the length, TRM's acceptance), the response length and
the reward variance within a group (OTB). Where the testbed is far from the paper in such a
quantity, a negative verdict says as much about the regime as about the claim.

Notation: ``warm`` the recipe's warm start, ``mid`` GRPO half-way through the recipe (seed 1);
``ratio`` = testbed / paper; the paper's regime = ratio within ``[0.5, 2]``.

Modules, one line each:

- ``quantities``: the quantities, the claims they drive, the papers' values with their
  citation, the ratio rule and the "regime-limited?" reading.
- ``measure``: the regime probe: every quantity on a recipe's two policies, a few GRPO batches
  each (``tailtheory measure regime_NAME``, stored in
  ``results/regime_<recipe>.json``).
- ``sources``: which stored measurement each number is read from (stored studies where a recipe
  has them, the probe for the rest).
- ``table``: the table, the per-claim reading, ``docs/regime.md``
  (``python -m tailtheory.regime.table``) and notebook 04's figure.

The size axis (each effect per rung of the model-size ladder, its trend verdict, V7's and V8's
over the rungs) is the ladder's: :mod:`tailtheory.ladder`.

The package sits above the paper sections (it reads their stored measurements) and beside the
front ends (``cli``, ``diagnose``): nothing below imports it.
"""
