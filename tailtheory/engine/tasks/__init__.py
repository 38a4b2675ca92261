"""The tasks wing: verifiable problems as text, and the words they are written in.

- ``task``: the task type, its rewards read from decoded text, and the catalog of tasks
  (``kk``, ``kk_trace``, ``kk_prose``, ``kk_knights``, ``chain_sum``).
- ``knights_knaves``: the Knights and Knaves renderings and their parsers.
- ``tokenizer``: the word-level tokenizer the toolkit's tiny models speak.
- ``lengths``: response lengths and the response cap a task needs.
- ``chat``: a task's turn in a model's own conventions: the generation prompt (chat template,
  thinking off) and the stop ids that end a response.
"""
