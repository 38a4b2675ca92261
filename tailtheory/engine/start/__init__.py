"""The start wing: the model a run starts from.

- ``load``: load and check a run's starting model and its tokenizer (a folder, a warm start,
  a random model), and record its provenance.
- ``sft``: supervised warm-starting on a task.
- ``warm_cache``: the cache of warm starts, keyed by their configuration.
- ``corpus_lm``: the corpus language model that the ``matched`` recipe's warm start begins from.
- ``text_windows``: windows of the corpus text, the text-sized workload.
"""
