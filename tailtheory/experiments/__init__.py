"""The experiments floor: training studies as values, the run cache, and what runs start from.

It sits between the engine (which imports nothing from it) and the paper sections (which
import both), and knows no paper. Modules, one line each (``tests/experiments/`` mirrors
them):

- ``study``: a training study (arms selected by tags, seeds, one comparison rule) and the
  registry of studies.
- ``runs``: the run cache and the one runner (each run's CPU time recorded); a run's identity.
- ``executors``: where a study's runs train: this machine's workers, Ray tasks or a SLURM job
  array (submitit), the driver storing every record it receives.
- ``cluster``: the executors' names, options and command-line flags.
- ``remote``: one run away from the driver: the job a worker is shipped (the start's weights)
  and the record it returns.
- ``incremental``: every study's store, ``results/<name>.json``, filled run by run.
- ``measures``: every other stored measurement by name (how it is made again, its cost), and
  what ``tailtheory measure`` lists and checks of every store.
- ``comparison``: a measurement across arms and seeds, and its verdict.
- ``run_numbers``: a run read into the numbers a study keeps: its summary, its curves, its
  token dump.
- ``recipes``: named training recipes, every field of a run that a testbed fixes under one
  name; ``learn`` is the learning testbed, ``matched`` the recipe that matches the papers'
  Fig. 1(a) histogram, ``decide`` one whose low-probability tokens decide the answer.
- ``presets``: the presets of the training notebooks (``quick``, ``full`` and the recipes'
  ``learn``, ``matched``, ``decide``): each one's warm start, train config and seeds.
- ``policies``: the recipes' shared policies (the warm start and the half-way policy) that
  several sections probe.
- ``learning``: does GRPO learn on a recipe? The learning-curve studies of ``learn`` and
  ``matched``, each with its criterion.
- ``plot``: ``tailtheory plot RUN ...``: runs' curves against step, seeds as a band.
"""
