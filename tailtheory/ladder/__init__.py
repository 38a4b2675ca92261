"""The model-size ladder: every claim's effect measured again at growing sizes of one
architecture, with the rule that reads a trend over the sizes.

Every trained-model verdict of the ``matched`` recipe rests on one size (1.64M parameters); the
papers' models have 1.5B to 7B. The ladder builds the same pipeline at larger sizes (the rungs,
:mod:`tailtheory.engine.start.rungs`: a run must know its rung's warm start, so the rungs' shapes
stay with the engine) and asks of each claim whether its effect moves with size.

Modules (one room: a measurement that exists only because of the size axis lives here; the
functions that measure *any* model stay where a user's checkpoint reaches them:
``tailtheory.tim.precision``, ``tailtheory.mismatch.batch_shape``):

- ``build``: the rungs built (corpus LM, warm start) and their record ``results/ladder.json``;
  the per-rung store helpers every part uses.
- ``models``: the models of the ladder, each build of a rung named by its weights
  (``{rung}.b{build}-{fingerprint}``), committed, recorded or unrecorded
  (``results/ladder_models.json``); where a model's weights are kept and how to load them.
- ``probes``: the effects and V8 on named models (``results/ladder_probes.json``,
  ``results/v8_models.json``), one point per build, and the family of trend tests decided by
  Holm's method.
- ``effects``: the per-rung effects of L1, L4, L5, M7, V2, P4 (``results/ladder_effects.json``)
  and their trend verdicts.
- ``decide``: L1, L4, L5 on the ``decide`` recipe at two sizes and along the ladder.
- ``mismatch``: V7 (bf16 against fp16) and V8 (batch shape) on the rungs, measured and read.
- ``speed``: the GRPO step's speed at a rung.
- ``dose``: V6 along the ladder, the logit-noise calibration and the ``dose_ladder`` study.
- ``trend``: the trend rule, an effect against ``log10`` of the size with builds as units;
  Holm's method over a family of trends; Welch's t for two sizes.
- ``figure``: notebook 08's figure, each effect against size.
- ``place``: a run's k3 beside V6's threshold at the nearest rung (read by ``diagnose``).
- ``cli``: the command ``tailtheory ladder ACTION``: list, status, build the rungs, and measure
  on them.
- ``registrations``: everything the package registers, in one place (the catalog imports it).

Floor: a front end, beside ``regime``; it imports the sections (their probes) and the
experiments floor, and nothing of the front ends but itself. ``diagnose`` reads the ladder's
placement (``place``); the ladder never imports ``diagnose``, so there is no circle.
"""
