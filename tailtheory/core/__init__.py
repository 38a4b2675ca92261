"""What every section shares: validation, exact tabular policies, the claims registry, output.

- `checks`: input validation of every theory module (logits, probabilities, tokens, masks) and
  the named tolerances (`ATOL_F64`).
- `tabular`: `TabularPolicy`, an autoregressive policy with one logit row per context whose
  sequences are enumerated exactly (the setting of P2, T1-T13, O1-O6).
- `models`: tiny Hugging Face causal LMs built from a config on the spot (S5, M7, the engine);
  a saved model, its tokenizer (`load_tokenizer`) and its folder's fingerprint read from disk.
- `forward`: the trainer's float32 full forward of a causal LM and its padding helpers.
- `fused`, `fused_grad`: the per-token statistics of `stats` straight from the hidden states and the LM
  head (a fused head, never forming the logits), with its full-logits reference and the log-prob's
  own backward.
- `stats`: per-token statistics (log-prob, entropy, `sum p^2`, exact KL, pruned mass) in one
  chunked pass over the logits, with the naive reference they equal.
- `registry`: every claim id registered once with its check, `run_claim` and the verdicts.
- `report`, `ledger`, `readme`, `docs`: the claims table, `claims.json`, the ledger
  `paper_repro.md`, the README's claims table and `docs/claims.md`, regenerated from the code.
- `repro`: `make repro`'s comparison of the regenerated figures and `claims.json` with the
  committed ones (verdicts must match; numbers and files that moved are listed).
- `provenance`: the fingerprint of a run's starting weights and the CPU it ran on; a stored
  measurement never mixes rows of two starting models under one warm-start key.
- `io`: the figures directory, notebook presets, atomic writes and `save_figure`.
- `display`: notebook output: in a Jupyter kernel figures inline (`show_figure`, captioned by
  `provenance`) and the verdict report as an HTML table; files and plain text elsewhere.
"""
