"""Does GRPO learn here? The ``learn`` recipe's runs, summarised per seed, and its verdict.

The criterion, fixed before the seeds were run: for every seed of :data:`SEEDS`,

- **held-out gain** = mean of the run's last two held-out evaluations (256 problems each, after
  100 and 110 of its 120 updates) minus the evaluation at step 0 (the warm start) >= 0.20, and
- **rising reward**: mean reward of the last 20 steps > mean reward of the first 20 steps.

``LEARNS`` when every seed meets both, else ``DOES-NOT-LEARN`` naming the seeds that missed.
Seeds 1-5 (the recipe was tuned on seed 0; seed 11 is the fresh-clone check). The numbers live in
``results/learn_curve.json`` (a stored measurement, refused when the recipe changes), written
by ``python -m tailtheory.engine.learning`` (trains the missing runs, two at a time).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

GAIN = 0.20
"""The least held-out gain every seed must show."""

SEEDS = (1, 2, 3, 4, 5)
"""Seeds of the stored learning curve (the recipe was tuned on seed 0)."""

WINDOW = 20
"""Steps averaged at each end of the reward curve."""

NAME = "learn_curve"
COMMAND = "python -m tailtheory.engine.learning"


def summarize(run: str | Path) -> dict:
    """One run's numbers: warm-start and final held-out accuracy, gain, reward at both ends."""
    from tailtheory.engine.start import read_provenance
    from tailtheory.engine.trainer import read_metrics

    lines = read_metrics(run)
    evals = [(m["step"], m["eval/accuracy"]) for m in lines if m.get("eval/accuracy") is not None]
    if len(lines) < 2 * WINDOW or len(evals) < 3 or evals[0][0] != 0:
        raise ValueError(f"{run}: needs >= {2 * WINDOW} steps and held-out evaluations from step 0 "
                         f"(has {len(lines)} steps, {len(evals)} evaluations)")
    warm, final = evals[0][1], statistics.fmean(a for _, a in evals[-2:])
    reward = [m["reward/mean"] for m in lines]
    return {"seed": json.loads((Path(run) / "config.json").read_text())["seed"],
            "steps": len(lines), "warm": warm, "final": final, "gain": final - warm,
            "final_steps": [s for s, _ in evals[-2:]],
            "reward_first": statistics.fmean(reward[:WINDOW]),
            "reward_last": statistics.fmean(reward[-WINDOW:]),
            "train_seconds": sum(m["time/step_s"] for m in lines),
            "len_mean": statistics.fmean(m["rollout/len_mean"] for m in lines),
            **({"provenance": prov} if (prov := read_provenance(run)) is not None else {})}


def median_length(run: str | Path, final: bool = True, n: int = 256) -> float:
    """Median length (tokens, EOS included) of responses sampled from the run's final weights
    (``final``) or from its warm start, on ``n`` held-out problems at the run's temperature."""
    import torch

    from tailtheory.engine.checkpoint import CHECKPOINT, read_checkpoint
    from tailtheory.engine.config import TrainConfig
    from tailtheory.engine.evaluate import _held_out
    from tailtheory.engine.rollout import RolloutConfig, RolloutEngine
    from tailtheory.engine.trainer import load_start

    cfg = TrainConfig(**json.loads((Path(run) / "config.json").read_text()))
    model, task = load_start(cfg)
    if final:
        model.load_state_dict(read_checkpoint(Path(run) / CHECKPOINT)["model"])
    problems = list(_held_out(task, n))
    engine = RolloutEngine(model, RolloutConfig(path="kv", backend=cfg.rollout_backend,
                                                temperature=cfg.temperature,
                                                max_new_tokens=task.max_response_len))
    rb = engine.generate([p.prompt_ids for p in problems], eos_id=task.eos_id,
                         pad_id=task.pad_id, generator=torch.Generator().manual_seed(0))
    return float(statistics.median(rb.mask.sum(-1).tolist()))


def verdict(rows: list[dict]) -> tuple[str, str]:
    """``(verdict, reason)`` of the criterion in the module docstring over per-seed ``rows``."""
    if not rows:
        raise ValueError("no runs to judge")
    missed = [r["seed"] for r in rows
              if not (r["gain"] >= GAIN and r["reward_last"] > r["reward_first"])]
    gains = ", ".join(f"{r['gain']:+.3f}" for r in rows)
    if missed:
        return "DOES-NOT-LEARN", f"seeds {missed} missed (gains {gains})"
    return "LEARNS", f"every seed gained >= {GAIN} held out (gains {gains}) with a rising reward"


def config() -> dict:
    """What the stored measurement depends on: the recipe's fields, the seeds, the criterion."""
    from tailtheory.engine.recipes import RECIPES

    return {"recipe": RECIPES["learn"], "seeds": list(SEEDS), "gain": GAIN, "window": WINDOW}


def run_dirs(root: str | Path = "runs/learn") -> list[Path]:
    """The run directory of each seed of :data:`SEEDS` under ``root``."""
    return [Path(root) / f"seed_{s}" for s in SEEDS]


def measure(root: str | Path = "runs/learn", workers: int = 2) -> dict:
    """Train the missing seeds of the ``learn`` recipe (``workers`` at a time, one thread
    each), then store and return the per-seed summaries and the verdict."""
    import subprocess
    import time
    from concurrent.futures import ThreadPoolExecutor

    from tailtheory.core.io import atomic_write_json
    from tailtheory.core.measurements import save_measurement

    def one(run: Path) -> dict:
        """Train one seed in a fresh interpreter; its wall-clock and CPU seconds (None when the
        run was already there)."""
        done = run / "timing.json"
        if done.exists():
            return json.loads(done.read_text())
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "tailtheory.cli", "train", "--recipe", "learn",
               "--seed", run.name.split("_")[1], "--out", str(run), "--threads", "1", "--quiet",
               *(["--resume"] if run.exists() else [])]  # an interrupted run continues
        proc = subprocess.Popen(cmd)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed with exit status {proc.returncode}")
        timing = {"wall_seconds": time.perf_counter() - t0,
                  "cpu_seconds": usage.ru_utime + usage.ru_stime}
        atomic_write_json(done, timing)
        return timing

    runs = run_dirs(root)
    with ThreadPoolExecutor(workers) as pool:
        timings = list(pool.map(one, runs))
    rows = [{**summarize(r), **t, "len_median_final": median_length(r)}
            for r, t in zip(runs, timings)]
    v, why = verdict(rows)
    data = {"rows": rows, "verdict": v, "reason": why,
            "len_median_warm": median_length(runs[0], final=False)}
    save_measurement(NAME, config(), data, COMMAND)
    return data


CURVES = {"eval/accuracy": "held-out accuracy", "reward/mean": "train reward"}
"""The metrics the learning figure draws, and their names on it."""


def curves(runs) -> "pd.DataFrame":
    """Long table ``label, step, seed, metric, value`` of the runs (:func:`long_table` of
    :func:`load_runs`): held-out accuracy at its evaluations, train reward (mean of the step's
    responses) at every step, under the names of :data:`CURVES`."""
    from tailtheory.engine.plot import long_table
    from tailtheory.engine.runs import load_runs

    long = long_table(load_runs(runs))
    long = long[long["metric"].isin(list(CURVES))].copy()
    long["metric"] = long["metric"].map(CURVES)
    return long.reset_index(drop=True)


def plot_learning(runs, smooth: int = 10):
    """Held-out accuracy and train reward against step: mean over seeds with the min-max band
    (:func:`~tailtheory.engine.plot.seed_bands`), every seed as a thin line; the reward as a
    ``smooth``-step rolling mean. Returns ``(figure, long table)``; save both with
    :func:`tailtheory.core.io.save_figure`."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    from tailtheory.engine.plot import seed_bands

    df = curves(runs).sort_values(["seed", "step"])
    rew = df["metric"] == "train reward"
    df.loc[rew, "value"] = (df[rew].groupby("seed")["value"]
                            .transform(lambda v: v.rolling(smooth, min_periods=1).mean()))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, metric in zip(axes, CURVES.values()):
        part = df[df["metric"] == metric]
        sns.lineplot(part, x="step", y="value", units="seed", estimator=None, ax=ax,
                     color="0.6", linewidth=0.6, alpha=0.7)
        seed_bands(part, x="step", y="value", hue="label", ax=ax, palette=["C0"],
                   marker="o" if metric == "held-out accuracy" else None)
        ax.plot([], [], color="C0", label=f"mean of {part['seed'].nunique()} seeds "
                                          f"(band: min-max)")
        title = metric if metric != "train reward" else f"train reward ({smooth}-step mean)"
        ax.set(title=title, xlabel="GRPO step", ylabel=metric)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle("tailtheory train --recipe learn: kk_trace (2 people), 256 responses a step")
    fig.tight_layout()
    return fig, df


if __name__ == "__main__":
    out = measure()
    print(out["verdict"], "-", out["reason"])
    from tailtheory.core.io import save_figure

    fig, table = plot_learning(run_dirs())
    print(f"wrote {save_figure(fig, 'learn_curve', table)}")
