"""The start wing: the models a run starts from, and how they are built.

The run's own loading and checking of its starting model is :mod:`tailtheory.engine.load`.

- ``sft``: supervised warm-starting of a tiny LM on a task, into an accuracy window.
- ``warm_cache``: the cache of warm starts, keyed by their configuration.
- ``sft_model``: warm-starting a user's checkpoint on a task (``tailtheory sft --model PATH``).
- ``corpus_lm``: the corpus language model (pretrained on Python's own stdlib) that the
  ``matched`` recipe's warm start begins from.
- ``pretrain``: the corpus LM's pretraining loop.
- ``resume``: checkpoints of a long build, so that a build stopped part-way continues.
- ``rungs``: the rungs of the model-size ladder: the ``matched`` testbed's architecture at
  several sizes.
- ``text_windows``: token windows of the corpus LM's held-out text, read with a checkpoint's
  own tokenizer, for the probes of any checkpoint.
"""
