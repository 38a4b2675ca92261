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
- ``claims``: the registered claims of the size axis: V7, V8 and the trends Z1-Z10 over
  named models, and their rows of the ledger's and the README's tables.
- ``report``: what ``verify`` and ``ladder status`` print about model size.
- ``pages``: the size axis's numbers on ``README.md``, ``paper_repro.md`` and
  ``docs/evidence.md``, generated from the stores between markers (a stale page fails a test).
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

The claims of the size axis (rules written in the ledger before their rows; every row names its
model, ``RUNG.bBUILD-FINGERPRINT``, and the machine that measured it):

- **V7** (after Qi et al., arXiv 2510.26788): fp16 rollouts remove most of the mismatch bf16
  rollouts create, the bf16 / fp16 ratio of mean per-token k3 about 64 (in [32, 128]), per named
  model and machine; on a CPU the same-dtype setting compares two CPU kernels.
- **V8** (the frameworks' reports disagree on its direction): the share of tokens a padded
  batch moves by more than 1e-3 in log-probability, against model size.
- **Z1-Z10**: the trends against model size of L1 (Spearman, slope), L4 (d, e, f), L5 (AR,
  Lopti), M7, V2 and P4 on the ``matched`` recipe, over builds, Holm over the family of 11.

| claim | check | measured by | store |
|---|---|---|---|
| V7 | `claims._v7` | `mismatch.measure_v7` | ``v7_64``, ``v7_units`` |
| V8 | `claims._v8` | `probes.measure_v8` | ``v8_models`` |
| Z1 | `claims._z1` | `probes.measure_probes` | ``ladder_probes`` |
| Z2 | `claims._z2` | `probes.measure_probes` | ``ladder_probes`` |
| Z3 | `claims._z3` | `probes.measure_probes` | ``ladder_probes`` |
| Z4 | `claims._z4` | `probes.measure_probes` | ``ladder_probes`` |
| Z5 | `claims._z5` | `probes.measure_probes` | ``ladder_probes`` |
| Z6 | `claims._z6` | `probes.measure_probes` | ``ladder_probes`` |
| Z7 | `claims._z7` | `probes.measure_probes` | ``ladder_probes`` |
| Z8 | `claims._z8` | `probes.measure_probes` | ``ladder_probes`` |
| Z9 | `claims._z9` | `probes.measure_probes` | ``ladder_probes`` |
| Z10 | `claims._z10` | `probes.measure_probes` | ``ladder_probes`` |

Floor: a front end, beside ``regime``; it imports the sections (their probes) and the
experiments floor, and nothing of the front ends but itself. ``diagnose`` reads the ladder's
placement (``place``); the ladder never imports ``diagnose``, so there is no circle.
"""
