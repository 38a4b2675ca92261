"""Decisiveness: which of a policy's low-probability tokens decide the answer.

Source: the question LOPTI (Yang et al., arXiv 2505.12929) leaves open: its low-probability
tokens dominate the gradient (L1, L4), but the paper does not say whether they are the tokens
that decide the answer or free choices the reward never reads. A token's decisiveness ``D`` is
how much the expected reward moves with it, estimated by branch rollouts.

Modules (one job each; the exact check of the estimator, a scripted policy whose ``D`` is known
in closed form, lives with the tests: ``tests/lopti/decisive/scripted.py``):

- ``branches``: ``D`` and its standard error for one token by paired branch rollouts.
- ``coupled``: the branches' shared randomness, Gumbel-max noise keyed by word, piece and id.
- ``noise``: ``D`` beside its noise: excess mean, debiased RMS, three-way calls, reporting floor.
- ``probe``: decisiveness on GRPO batches, a stratified sample of tokens with their roles.
- ``calibration``: the threshold ``tau`` and the rollouts ``K``, fixed on free tokens
  (``results/decisive_calibration.json``).
- ``report``: LOPTI's bins split into decisive and free tokens, as tables and figures.
- ``store``: each recipe's stored decisiveness (``results/decisive_<recipe>.json``).
- ``frontier``: the designs tried for a recipe whose low-probability tokens decide the answer
  (``results/decisive_frontier.json``).
- ``designs``: the search, in a fixed order, for a recipe where those tokens decide and GRPO
  learns (study ``decide_designs``).
- ``gate``: the decisiveness gate a design that learns must pass
  (``results/decide_design_gate.json``).
"""
