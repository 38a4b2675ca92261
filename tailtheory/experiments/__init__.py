"""The experiments floor: training studies as values, the run cache, and what runs start from.

It sits between the engine (which imports nothing from it) and the paper sections (which
import both), and knows no paper.

- ``study``: a training study (arms selected by tags, seeds, one comparison rule) and the
  registry of studies.
- ``runs``: the run cache and the one runner (each run's CPU time recorded); a run's identity.
- ``incremental``: every study's store, ``results/<name>.json``, filled run by run.
- ``measures``: every other stored measurement by name (how it is made again, its cost), and
  what ``tailtheory measure`` lists and checks of every store.
- ``comparison``: a measurement across arms and seeds, and its verdict.
- ``run_numbers``: the numbers read back from a run's metric lines.
- ``presets`` / ``recipes``: where runs start; ``learn`` is the learning testbed, ``matched``
  the recipe that matches the papers' Fig. 1(a) histogram.
- ``policies``: the recipes' shared policies (the warm start and the half-way policy) that
  several sections probe.
- ``learning``: does GRPO learn on a recipe (the learning curve study)?
- ``plot``: learning curves from the run cache.
"""
