"""Dumps in the formats of NeMo-RL, prime-rl and slime / Miles, built as each framework writes
them, and the reading helpers their tests share (``test_nemo_rl.py``, ``test_prime_rl.py``,
``test_slime.py``, ``test_registry.py``)."""

import json

import numpy as np
import pandas as pd
import torch

from tailtheory.cli import main
from tailtheory.diagnose.read import expand_dumps, iter_batches, open_dumps
from tests.diagnose.test_read import _fails  # noqa: F401  (the one-line refusal, shared)


PAD = 0


def _responses(seed, steps=(1, 2, 3), n=6):
    """Per step, ``n`` responses: prompt tokens, response tokens of different lengths, the
    trainer's and the engine's log-probs, an advantage and a reward."""
    rng = np.random.default_rng(seed)
    out = []
    for step in steps:
        for i in range(n):
            p_len, r_len = 3 + i % 3, 4 + (3 * i + step) % 9
            lp = np.log(rng.uniform(0.02, 1.0, r_len))
            out.append(dict(step=step, i=i, prompt=rng.integers(5, 100, p_len).tolist(),
                            resp=rng.integers(5, 100, r_len).tolist(),
                            lp_train=lp, lp_roll=np.minimum(lp + rng.normal(0, 0.05, r_len), 0),
                            adv=float(i % 2 - 0.5), reward=float(i % 2)))
    return out


def _expected(resps, skip=None) -> pd.DataFrame:
    rows = []
    for r in resps:
        for t in range(len(r["resp"])):
            if skip and skip(r, t):
                continue
            rows.append(dict(step=r["step"], sample_id=r["i"], position=t,
                             token_id=r["resp"][t], logp_train=r["lp_train"][t],
                             logp_rollout=r["lp_roll"][t], advantage=r["adv"],
                             reward=r["reward"]))
    return pd.DataFrame(rows)


def _read(paths, fmt="auto") -> pd.DataFrame:
    dumps = open_dumps(expand_dumps(paths), fmt)
    frames = []
    for i, d in enumerate(dumps):
        for b in iter_batches(d, i, batch_rows=7):
            frames.append(pd.DataFrame(dict(
                step=b.step, sample_id=b.sample_id, position=b.position, token_id=b.token_id,
                logp_train=b.logp_train, logp_rollout=b.logp_train - b.log_rho,
                advantage=b.advantage, reward=b.reward, ok=b.ok)))
    return pd.concat(frames, ignore_index=True)


def _same(got: pd.DataFrame, want: pd.DataFrame, cols) -> None:
    key = ["step", "sample_id", "position"]
    got = got.sort_values(key).reset_index(drop=True)
    want = want.sort_values(key).reset_index(drop=True)
    assert len(got) == len(want)
    for c in cols:
        np.testing.assert_allclose(got[c].to_numpy(float), want[c].to_numpy(float), rtol=1e-6,
                                   atol=1e-6, err_msg=c)


def _report(tmp_path, *args):
    out = tmp_path / "diag"
    assert main(["diagnose", *map(str, args), "--out", str(out), "--quiet"]) == 0
    assert (out / "report.html").is_file()
    return json.loads((out / "summary.json").read_text())


def nemo_rl_dump(log_dir, resps, *, wrap=True, drop=()):
    """``log_dir/train_data_step{N}.jsonl`` as NeMo-RL's ``log_batched_dict_as_jsonl`` writes
    it: one line per sample, each value a one-element list, sequences right-padded."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for step in sorted({r["step"] for r in resps}):
        batch = [r for r in resps if r["step"] == step]
        L = max(len(r["prompt"]) + len(r["resp"]) for r in batch) + 2
        with open(log_dir / f"train_data_step{step}.jsonl", "w") as f:
            for idx, r in enumerate(batch):
                p, n = len(r["prompt"]), len(r["resp"])
                pad = L - p - n
                rec = {"content": [[{"role": "user", "content": "..."}]],
                       "rewards": r["reward"], "input_lengths": p + n,
                       "token_ids": r["prompt"] + r["resp"] + [PAD] * pad,
                       "token_loss_mask": [0] * p + [1] * n + [0] * pad,
                       "sample_loss_mask": 1.0,
                       "advantages": [r["adv"]] * L,
                       "generation_logprobs": [0.0] * p + r["lp_roll"].tolist() + [0.0] * pad,
                       # the trainer's: index t is token t; prompt positions hold real values
                       "prev_logprobs": [-3.0] * p + r["lp_train"].tolist() + [-7.0] * pad}
                rec = {k: v for k, v in rec.items() if k not in drop}
                if wrap:
                    rec = {k: [v] for k, v in rec.items()}
                f.write(json.dumps({**rec, "idx": idx}) + "\n")
    return log_dir


def prime_rl_dump(run_dir, resps, *, ranks=2, flip=False, ratio=None):
    """``run_dir/token_exports/step_{S}/rank_{R}.jsonl`` as prime-rl's ``TokenExporter``
    writes it: one line per sequence, prompt and completion, aligned per-token lists, non-finite
    floats as null. Sample ``i`` goes to rank ``i % ranks``; the last token of sample 1 carries
    ce weight (not sampled by the policy). ``ratio``: also the per-token ``importance_ratio``
    newer exports hold, ``exp(trainer - inference)`` (``"flip"``: ``exp(inference -
    trainer)``, a planted sign fault)."""
    for step in sorted({r["step"] for r in resps}):
        d = run_dir / "token_exports" / f"step_{step}"
        d.mkdir(parents=True, exist_ok=True)
        for rank in range(ranks):
            lines = []
            for r in [r for r in resps if r["step"] == step and r["i"] % ranks == rank]:
                p, n = len(r["prompt"]), len(r["resp"])
                inf = [0.0] * p + r["lp_roll"].tolist()
                tr = [-2.5] * p + r["lp_train"].tolist()
                lr = np.array(tr) - np.array(inf)
                mkl = np.expm1(-lr if flip else lr) - (-lr if flip else lr)
                rl = None if r["i"] != 1 else [0.0] * p + [1.0] * (n - 1) + [0.0]
                more = {} if ratio is None else {
                    "importance_ratio": np.exp(-lr if ratio == "flip" else lr).tolist()}
                lines.append(dict(schema_version=1, step=step, rank=rank, micro_step=0,
                                  micro_sequence_idx=len(lines), export_sequence_idx=r["i"],
                                  env_name="math", token_ids=r["prompt"] + r["resp"],
                                  position_ids=list(range(p + n)),
                                  loss_mask=[False] * p + [True] * n,
                                  advantages=[0.0] * p + [r["adv"]] * n,
                                  inference_logprobs=inf, trainer_logprobs=tr,
                                  entropy=[0.5] * (p + n), mismatch_kl=mkl.tolist(),
                                  rl_weights=rl or [None] * (p + n),
                                  ce_weights=[None] * (p + n), ref_kl_weights=[None] * (p + n),
                                  **more))
            (d / f"rank_{rank}.jsonl").write_text(
                "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
        (d / "STABLE").touch()
    return run_dir


def _slime_sample(r, *, drop_mask_at=None):
    p, n = len(r["prompt"]), len(r["resp"])
    mask = torch.ones(n, dtype=torch.int32)
    if drop_mask_at is not None:
        mask[drop_mask_at] = 0
    return dict(tokens=torch.tensor(r["prompt"] + r["resp"]), response_lengths=n,
                total_lengths=p + n, loss_masks=mask, rewards=r["adv"],
                rollout_log_probs=torch.tensor(r["lp_roll"], dtype=torch.float32),
                log_probs=torch.tensor(r["lp_train"], dtype=torch.float32),
                advantages=torch.full((n,), r["adv"]), truncated=0)


def slime_dump(dump_dir, resps):
    """``DIR/train_data/{rollout_id}.pt`` as slime's ``_build_dump_payload`` writes it
    (``format_version`` 2): ``samples`` sorted by rollout position, ``raw_reward`` at the top.
    Sample 2's third response token is tool output (loss mask 0)."""
    d = dump_dir / "train_data"
    d.mkdir(parents=True, exist_ok=True)
    for step in sorted({r["step"] for r in resps}):
        batch = [r for r in resps if r["step"] == step]
        samples = []
        for pos, r in enumerate(batch):
            s = _slime_sample(r, drop_mask_at=2 if r["i"] == 2 else None)
            samples.append(dict(s, data_parallel_rank=pos % 2, sample_index=r["i"],
                                rollout_position=pos))
        torch.save(dict(format_version=2, rollout_id=step, rank=0, samples=samples,
                        dp_shards=[], raw_reward=[r["reward"] for r in batch]),
                   d / f"{step}.pt")
    return dump_dir


def miles_dump(dump_dir, resps, tp=2):
    """``DIR/train_data/{rollout_id}_{rank}.pt`` as Miles' ``save_debug_train_data_for_rank``
    writes it: one file per rank, ``rollout_data`` of per-sample lists; two data-parallel
    shards, each written by ``tp`` tensor-parallel ranks (identical copies)."""
    d = dump_dir / "train_data"
    d.mkdir(parents=True, exist_ok=True)
    for step in sorted({r["step"] for r in resps}):
        batch = [r for r in resps if r["step"] == step]
        for dp in range(2):
            shard = [r for r in batch if r["i"] % 2 == dp]
            cols = {k: [_slime_sample(r)[k] for r in shard] for k in _slime_sample(shard[0])}
            cols["rewards"] = np.array([r["reward"] for r in shard], dtype=np.float32)
            cols["sample_indices"] = np.array([r["i"] for r in shard])
            cols["raw_reward"] = [r["reward"] for r in batch]
            for t in range(tp):
                rank = dp * tp + t
                torch.save(dict(rollout_id=step, rank=rank, rollout_data=cols, cp_rank=0,
                                cp_size=1, qkv_format="thd"), d / f"{step}_{rank}.pt")
    return dump_dir


class _RunsCode:
    """Unpickling this would create a file: the reader must never do it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))
