"""Which tokens each method moves: the change of log-probability from the warm start to each
arm's final policy, per ``pi_old`` bin and per token role (L7, L8, L9 on ``matched``).

Source: LOPTI (Yang et al., arXiv 2505.12929), Figure 3 (which tokens an update raises, per
``pi_old`` bin); the methods of :mod:`tailtheory.lopti.opposite` (arXiv 2603.22117, 2506.01939,
2605.07660) move the low-probability tokens more (``upweight``) or train on a fifth of the tokens.

Fixed responses: the batches of the ``matched`` decisiveness store
(:mod:`tailtheory.lopti.decisive.store`: step 0 of GRPO seeds :data:`~store.SEEDS`, its first
:data:`~store.PROMPTS` prompts x 8 responses), sampled again from the recipe's warm start as the
store sampled them. Each arm's final checkpoint (:data:`ARMS`: the studies
:data:`~tailtheory.lopti.training.MATCHED_OPPOSITE_STUDIES`, GRPO shared) scores every response
token: ``dlogp = log pi_arm(y_t) - log pi_warm(y_t)`` (one function, the same shapes, for both;
the warm start's one forward also gives the entropy the top-entropy selection reads).

Per arm and seed the store keeps the mean ``dlogp`` and token count of each bin x role group
(:data:`ROLE_GROUPS`, the ``kk_prose`` grammar's word roles) and of each bin x call (decisive,
free, undetermined: :func:`~tailtheory.lopti.decisive.noise.three_way` at the calibrated ``tau``)
over the store's probed tokens. A call joins a token only when the batch sampled again is the
store's: every probed token's ``pi_old`` equal to the stored ``p`` within :data:`P_TOL`; another
batch (another machine's rollout) keeps its role means and drops its calls, counted in
``batches[i]["joined"]``. :func:`moved_table` gives seed means with their standard errors.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from tailtheory.core.forward import position_ids
from tailtheory.core.measurements import fingerprint, measured
from tailtheory.core.provenance import measured_on, weights_fingerprint
from tailtheory.core.stats import token_stats
from tailtheory.engine.checkpoint import read_checkpoint
from tailtheory.engine.devices import model_generator
from tailtheory.engine.load import load_start
from tailtheory.engine.rollout.engine import RolloutEngine
from tailtheory.engine.threads import model_threads
from tailtheory.engine.trainer import rollout_config
from tailtheory.experiments.comparison import mean_se
from tailtheory.experiments.measures import Measure, measure_command, register_measure
from tailtheory.experiments.policies import grpo_config
from tailtheory.experiments.runs import finished_steps, run_key, runs_root
from tailtheory.lopti.decisive import calibration as cal
from tailtheory.lopti.decisive import store
from tailtheory.lopti.decisive.noise import CALLS, cluster_bootstrap, three_way
from tailtheory.lopti.decisive.probe import batch_responses, token_roles
from tailtheory.lopti.onestep import probe_batch
from tailtheory.lopti.opposite import top_entropy_mask
from tailtheory.lopti.probes import N_BINS, prob_bins
from tailtheory.lopti.training import MATCHED_OPPOSITE_STUDIES

RECIPE = "matched"
"""The recipe whose arms are scored."""

STORE = "moved_matched"
"""``results/moved_matched.json``."""

ROLE_GROUPS = {"fork": ("fork",), "free choice": ("synonym", "order"),
               "scaffold": ("scaffold",), "off path": ("off_path", "junk")}
"""Word roles (:data:`~tailtheory.engine.tasks.knights_knaves.ROLES`) grouped: the reasoning
forks, the choices the reward never reads, the format's fixed words, what lies off the grammar."""

P_TOL = 1e-6
"""How far a regenerated token's ``pi_old`` may lie from the stored ``p`` for its call to join."""


def arms() -> dict[str, list]:
    """Label -> configs over seeds: GRPO (shared by the three studies) and each method."""
    out = {}
    for study in MATCHED_OPPOSITE_STUDIES.values():
        out.update(study.configs(RECIPE))
    return out


def moved_config() -> dict:
    """What the store is keyed by: the batches, ``tau``, the decisiveness store it joins and each
    arm's runs (their store identities)."""
    ident = {}
    for study in MATCHED_OPPOSITE_STUDIES.values():
        ident.update(study.identity(RECIPE))
    return {"version": 2, "recipe": RECIPE, "seeds": list(store.SEEDS), "prompts": store.PROMPTS,
            "tau": cal.TAU, "decisive": fingerprint(store.decisive_config(RECIPE)),
            "arms": {label: fingerprint(v) for label, v in sorted(ident.items())}}


def final_policy(cfg):
    """The model of ``cfg``'s finished run in the run cache; a ``ValueError`` naming the study
    that trains it when the run is missing or unfinished."""
    run = runs_root() / run_key(cfg)
    if finished_steps(run) < cfg.steps:
        names = [s.name for s in MATCHED_OPPOSITE_STUDIES.values()
                 if any(cfg in cs for cs in s.configs(RECIPE).values())]
        train = (f"tailtheory study {names[0]}" if names else
                 f"tailtheory train (method {cfg.method}, seed {cfg.seed})")
        raise ValueError(f"run {run.name} ({cfg.method}, seed {cfg.seed}) is not finished in the "
                         f"run cache; train it with: {train}")
    state = read_checkpoint(run / "checkpoint.pt")
    if state["step"] != cfg.steps:
        raise ValueError(f"{run}/checkpoint.pt is at step {state['step']}, not {cfg.steps}")
    model, _ = load_start(replace(cfg, device="cpu"))
    model.load_state_dict(state["model"])
    return model.float().eval()


def _batches(model, task, cfg, stored_tokens: list[dict]) -> list[dict]:
    """The fixed batches: per store seed its probe batch's first rows, bins, role groups and the
    joined calls (``(row, t) -> call``, empty when the batch is not the store's)."""
    out = []
    G = cfg.group_size
    for s in store.SEEDS:
        c = replace(cfg, seed=s)
        pb = probe_batch(model, task, c, RolloutEngine(model, rollout_config(c, task)),
                         model_generator(model, s), 0)
        n = min(store.PROMPTS, cfg.prompts_per_step) * G
        P, mask, pi_old, responses = batch_responses(pb, n)
        group = torch.full(mask.shape, -1, dtype=torch.long)
        names = list(ROLE_GROUPS)
        for b, r in enumerate(token_roles(task, resp) for resp in responses):
            for t, role in enumerate(r or []):
                group[b, t] = next(i for i, g in enumerate(names) if role in ROLE_GROUPS[g])
        mine = [x for x in stored_tokens if x["seed"] == s and x["batch"] == 0]
        joined = all(x["t"] < mask.shape[1] and bool(mask[x["row"], x["t"]])
                     and abs(float(pi_old[x["row"], x["t"]]) - x["p"]) <= P_TOL for x in mine)
        calls = three_way([x["D"] for x in mine], [x["D_se"] for x in mine], cal.TAU)
        out.append({"seed": s, "pb": pb, "n": n, "prompts": n // G, "P": P, "mask": mask,
                    "pi_old": pi_old,
                    "bins": prob_bins(pi_old.double().clamp(0, 1)), "group": group,
                    "calls": {(x["row"], x["t"]): str(k) for x, k in zip(mine, calls)}
                    if joined else {}, "joined": joined, "probed": len(mine)})
    return out


@torch.no_grad()
def _token_stats(model, batch: dict, rows: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log pi(y_t), entropy)`` of ``model`` at each response token of the batch's first ``n``
    rows, the entropy over the full vocabulary at temperature 1: one forward a chunk of
    ``rows`` rows and one pass of :func:`~tailtheory.core.stats.token_stats` over its logits. The
    same function on the same shapes for every policy, so a difference of two is exact.
    Shapes: -> (n, T) each, 0 off the mask."""
    pb, n, P, mask = batch["pb"], batch["n"], batch["P"], batch["mask"]
    logp, ent = [], []
    for lo in range(0, n, rows):
        ids, attn = pb.input_ids[lo:lo + rows], pb.attention_mask[lo:lo + rows].bool()
        z = model(input_ids=ids, attention_mask=attn.long(), position_ids=position_ids(attn),
                  use_cache=False).logits
        st = token_stats(z[:, :-1], ids[:, 1:])
        for out, x in ((logp, st["logp"]), (ent, st["entropy"])):
            out.append(torch.cat([torch.zeros_like(x[:, :1]), x], 1)[:, P:])
    zero = torch.zeros(())
    return (torch.where(mask, torch.cat(logp).double(), zero),
            torch.where(mask, torch.cat(ent).double(), zero))


def selection_counts(entropy: list, batches: list[dict], fraction: float) -> dict:
    """Per role group, the response tokens per ``pi_old`` bin (``all``) and those the top
    ``fraction`` by ``entropy`` (one ``(n, T)`` tensor a batch) keeps (``top_entropy``:
    :func:`~tailtheory.lopti.opposite.top_entropy_mask`, each batch one step's, as the trainer
    selects them; at the warm start, the selection of step 0). A random ``fraction`` keeps
    ``all``'s shares in expectation."""
    out = {"all": {g: [0] * N_BINS for g in ROLE_GROUPS},
           "top_entropy": {g: [0] * N_BINS for g in ROLE_GROUPS}, "by_prompt": []}
    for h, b in zip(entropy, batches):
        kept, _ = top_entropy_mask(h, b["mask"], fraction)
        for i, g in enumerate(ROLE_GROUPS):
            for k in range(N_BINS):
                cell = b["mask"] & (b["group"] == i) & (b["bins"] == k)
                out["all"][g][k] += int(cell.sum())
                out["top_entropy"][g][k] += int((cell & kept).sum())
            rows = b["mask"] & (b["group"] == i)                          # per prompt: G rows
            G = b["n"] // b["prompts"]
            for q in range(b["prompts"]):
                part = slice(q * G, (q + 1) * G)
                out["by_prompt"].append([b["seed"], q, i, int(rows[part].sum()),
                                         int((rows & kept)[part].sum())])
    return out


def selection_table(data: dict):
    """Per role group: its share of all response tokens and of the top-entropy 20%, each with its
    prompt-clustered 95% bootstrap interval
    (:func:`~tailtheory.lopti.decisive.noise.cluster_bootstrap`) and the tokens and prompts it is
    read from, and its share of the lowest bin's tokens and of the lowest bin's kept ones."""
    import pandas as pd

    sel = data["selected"]
    tot = {k: sum(sum(v) for v in sel[k].values()) for k in ("all", "top_entropy")}
    low = {k: sum(v[0] for v in sel[k].values()) for k in ("all", "top_entropy")}
    rows = np.asarray(sel["by_prompt"], dtype=np.int64).reshape(-1, 5)
    prompts = rows[:, 0] * 100_000 + rows[:, 1]
    out = []
    for i, g in enumerate(ROLE_GROUPS):
        share = lambda grp, count, i=i: count[grp == i].sum() / max(count.sum(), 1)  # noqa: E731
        _, all_lo, all_hi = cluster_bootstrap(share, prompts, rows[:, 2], rows[:, 3])
        _, lo, hi = cluster_bootstrap(share, prompts, rows[:, 2], rows[:, 4])
        out.append({"group": g, "all tokens": sum(sel["all"][g]) / tot["all"],
                    "all low": all_lo, "all high": all_hi, "tokens": tot["all"],
                    "top-entropy 20%": sum(sel["top_entropy"][g]) / tot["top_entropy"],
                    "low": lo, "high": hi, "kept tokens": tot["top_entropy"],
                    "prompts": len(np.unique(prompts)),
                    "lowest bin": sel["all"][g][0] / low["all"],
                    "lowest bin, top-entropy": sel["top_entropy"][g][0] / low["top_entropy"]
                    if low["top_entropy"] else float("nan")})
    return pd.DataFrame(out)


def _cell_means(dlogp: list, batches: list[dict]) -> dict:
    """Per role group and per call, ``{"mean": [per bin], "n": [per bin]}`` over all batches."""
    sums = {("role", g): np.zeros((2, N_BINS)) for g in ROLE_GROUPS}
    sums.update({("call", c): np.zeros((2, N_BINS)) for c in CALLS})
    for d, b in zip(dlogp, batches):
        for i, g in enumerate(ROLE_GROUPS):
            for k in range(N_BINS):
                sel = b["mask"] & (b["group"] == i) & (b["bins"] == k)
                sums[("role", g)][:, k] += (float(d[sel].sum()), int(sel.sum()))
        for (row, t), call in b["calls"].items():
            sums[("call", call)][:, int(b["bins"][row, t])] += (float(d[row, t]), 1)
    out = {"role": {}, "call": {}}
    for (kind, name), (s, n) in sums.items():
        out[kind][name] = {"mean": [float(x / m) if m else float("nan") for x, m in zip(s, n)],
                           "n": [int(m) for m in n]}
    return out


def measure_moved(progress: bool = True) -> dict:
    """Score the fixed batches under every arm's final policy (module docstring)."""
    from tqdm.auto import tqdm

    cfg = grpo_config(RECIPE)
    warm, task = load_start(cfg)
    warm = warm.float().eval()
    stored = store.decisive_data("quick", RECIPE)["warm"]
    if stored.get("weights") != weights_fingerprint(warm):
        raise ValueError(f"results/decisive_{RECIPE}.json measured weights "
                         f"{stored.get('weights')}, not this warm start's "
                         f"{weights_fingerprint(warm)}")
    with model_threads(warm):
        batches = _batches(warm, task, cfg, stored["tokens"])
        base, entropy = zip(*(_token_stats(warm, b) for b in batches))
        todo = [(label, c) for label, cs in arms().items() for c in cs]
        result = {}
        for label, c in tqdm(todo, desc="arms x seeds", disable=not progress):
            model = final_policy(c)
            d = [_token_stats(model, b)[0] - w for b, w in zip(batches, base)]
            result.setdefault(label, {})[str(c.seed)] = {
                "final_weights": weights_fingerprint(model), **_cell_means(d, batches)}
        selected = selection_counts(entropy, batches, cfg.token_fraction)
    return {"arms": result, "selected": selected, **measured_on(warm),
            "batches": [{"seed": b["seed"], "responses": b["n"], "joined": b["joined"],
                         "probed": b["probed"]} for b in batches]}


def moved_data(profile: str) -> dict:
    """The stored measurement (``quick``) or a new one, stored (``thorough``)."""
    return measured(STORE, moved_config(), lambda: measure_moved(True), profile,
                    measure_command(STORE))


def moved_table(data: dict):
    """One row per arm, kind (``role`` / ``call``), group and bin: the seed mean of the mean
    ``dlogp``, its standard error over seeds (NaN with one seed or a cell no seed has), seeds,
    and tokens a seed (the same fixed tokens in every seed)."""
    import pandas as pd

    rows = []
    for label, seeds in data["arms"].items():
        first = next(iter(seeds.values()))
        for kind in ("role", "call"):
            for name, cell in first[kind].items():
                for k in range(N_BINS):
                    xs = [v[kind][name]["mean"][k] for v in seeds.values()]
                    xs = [x for x in xs if not math.isnan(x)]
                    m, se = mean_se(xs) if xs else (float("nan"), float("nan"))
                    rows.append({"arm": label, "kind": kind, "group": name, "bin": k,
                                 "dlogp": m, "se": se, "seeds": len(xs),
                                 "tokens": cell["n"][k]})
    return pd.DataFrame(rows)


BIN_LABELS = ("[0, .25]", "(.25, .5]", "(.5, .75]", "(.75, 1]")
"""The ``pi_old`` bins as the figures name them."""


def plot_moved(data: dict):
    """One panel per role group (mean ``dlogp`` per ``pi_old`` bin, one line per arm, the seeds'
    standard error as bars; a cell without tokens is left out) and one of the lowest bin's
    tokens by decisive call (bars per arm, with the tokens a seed). Returns ``(figure, table)``
    (:func:`moved_table`)."""
    import matplotlib.pyplot as plt

    table = moved_table(data)
    labels = list(data["arms"])
    groups = list(ROLE_GROUPS)
    fig, axes = plt.subplots(1, len(groups) + 1, figsize=(3.2 * (len(groups) + 1), 3.2),
                             constrained_layout=True)
    for ax, g in zip(axes, groups):
        sub = table[(table.kind == "role") & (table.group == g)]
        for k, label in enumerate(labels):
            r = sub[(sub.arm == label) & (sub.tokens > 0)]
            ax.errorbar(r["bin"] + 0.06 * (k - 1.5), r["dlogp"], yerr=r["se"], marker="o",
                        ms=3, capsize=2, label=label)
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_xticks(range(N_BINS), BIN_LABELS, fontsize=7)
        n = sub[sub.arm == labels[0]]["tokens"].tolist()
        ax.set_title(f"{g} ({sum(n)} tokens)", fontsize=9)
        ax.set_xlabel("pi_old bin")
    axes[0].set_ylabel("mean change of log p, warm -> final")
    ax = axes[-1]
    low = table[(table.kind == "call") & (table.bin == 0)]
    width = 0.8 / len(labels)
    for k, label in enumerate(labels):
        r = low[low.arm == label].set_index("group").reindex(CALLS)
        ax.bar(np.arange(len(CALLS)) + width * (k - (len(labels) - 1) / 2), r["dlogp"],
               width, yerr=r["se"], capsize=2, label=label)
    n = low[low.arm == labels[0]].set_index("group").reindex(CALLS)["tokens"]
    ax.set_xticks(range(len(CALLS)), [f"{c}\n({int(m)})" for c, m in zip(CALLS, n)],
                  fontsize=7)
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_title("lowest bin, probed tokens by call", fontsize=9)
    axes[0].legend(fontsize=7)
    return fig, table


MEASURE = register_measure(Measure(
    STORE, "which tokens each method moves on matched: the change of log-probability from the "
    "warm start to each arm's final policy, per pi_old bin x token role and decisive call (L7-L9)",
    "about 2 CPU minutes (3 batches sampled again, 12 final policies scored; the runs must be "
    "in the run cache)", moved_config, lambda: moved_data("thorough")))
