"""``DIR/report.html``, its figures (PNG, each with its CSV) and ``DIR/summary.json``.

Source: the sections of :mod:`tailtheory.diagnose` (DVP arXiv 2512.23087, TRM arXiv 2512.23075,
TIM arXiv 2605.14220). The output folder is written whole or not at all: everything goes to a
temporary sibling folder, which then replaces ``DIR``. ``DIR`` must be missing, empty, or an
earlier diagnose output (it holds :data:`MARKER`); anything else is refused and left untouched.
"""

from __future__ import annotations

import html
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from tailtheory.core.io import atomic_write_text, save_figure
from tailtheory.diagnose.aggregate import ABS_EDGES, P_EDGES
from tailtheory.diagnose.sections import Diagnosis
from tailtheory.mismatch.logprob import mismatch_bound

MARKER = ".tailtheory-diagnose"
"""File that marks a folder as a diagnose output, which a later run may replace."""

SECTIONS = (
    ("faults", "Faults of the dumps", "the log-probs' domain, alignment and temperature"),
    ("envelope", "|Delta| against p, with M3's envelope", "M3, M7; DVP's (1-p) law"),
    ("tail_bias", "Mean signed Delta by probability: the tail bias", "M4, M5"),
    ("accumulation", "Sequence log-ratio against the number of tail tokens", "M6"),
    ("trm", "TRM's acceptance against threshold and length", "T12"),
    ("dvp", "What DVP's pruning would remove", "P1, P2, P4"),
    ("steps", "k1 and k3 over steps", "TIM's monitors (V2, V5)"),
    ("ratios", "Importance ratios against the corrections' caps", "TIM's corrections (V4)"),
    ("register", "The run's mean k3 on the mismatch dose-response register", "V6"),
    ("bottom_line", "Bottom line: what to do", "V6's register and the faults"),
)
"""The report's sections: table name, title, the claim ids it rests on."""


def check_out(out: Path) -> None:
    """Raise ``ValueError`` unless ``out`` may be (re)written: missing, an empty folder, or a
    folder holding :data:`MARKER`."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; choose a new folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ValueError(f"--out {out} exists and is not a diagnose output (no {MARKER}); "
                         f"choose a new or empty folder, nothing was written")


def write_report(d: Diagnosis, out: str | os.PathLike, inputs: list[Path]) -> Path:
    """Write the report, figures, CSVs and ``summary.json`` into ``out`` all at once."""
    out = Path(out)
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.diagnose-"))
    try:
        figures = draw_all(d, tmp)
        atomic_write_text(tmp / "summary.json", json.dumps(_clean(d.summary), indent=2) + "\n")
        if "register" in d.points:                        # the placement on V6's register
            atomic_write_text(tmp / "register.json",
                              json.dumps(_clean(d.points["register"]), indent=2) + "\n")
        atomic_write_text(tmp / "report.html", render_html(d, figures, inputs))
        atomic_write_text(tmp / MARKER, "written by tailtheory diagnose\n")
        os.chmod(tmp, 0o777 & ~_umask())
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out / "report.html"


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _swap(tmp: Path, out: Path) -> None:
    """Move ``tmp`` to ``out``; an earlier ``out`` is set aside first and deleted after."""
    check_out(out)
    if not out.exists():
        os.rename(tmp, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
    os.rename(out, old / "x")
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old / "x", out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _clean(x):
    """JSON-safe: NaN and +-inf become null, numpy scalars Python numbers."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


# --- figures ----------------------------------------------------------------------------------

def draw_all(d: Diagnosis, directory: Path) -> dict[str, str]:
    """Draw every section that has a table; returns section -> PNG name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = {}
    for name, fn in (("envelope", _envelope), ("tail_bias", _bias),
                     ("accumulation", _accumulation), ("trm", _trm), ("dvp", _dvp),
                     ("steps", _steps), ("ratios", _ratios)):
        if name in d.tables and len(d.tables[name]):
            fig, data = fn(d, plt)
            save_figure(fig, name, data, directory=directory)
            plt.close(fig)
            drawn[name] = f"{name}.png"
    if "envelope_hist_table" in d.points:  # the heat map behind the envelope figure
        atomic_write_text(directory / "envelope_hist.csv",
                          d.points["envelope_hist_table"].to_csv(index=False, float_format="%.8g"))
    return drawn


def _envelope(d: Diagnosis, plt):
    import pandas as pd
    from matplotlib.colors import LogNorm

    t, h = d.tables["envelope"], d.points["envelope_hist"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    mesh = ax.pcolormesh(10 ** P_EDGES, 10 ** ABS_EDGES, np.where(h.T > 0, h.T, np.nan),
                         norm=LogNorm(vmin=1, vmax=max(h.max(), 1)), cmap="Greys", shading="flat")
    fig.colorbar(mesh, ax=ax, label="tokens")
    ax.plot(t.p_mean, t.mean_abs_delta, "o", color="C0", ms=4, label="mean |Delta| per bin")
    ax.plot(t.p_mean, t.max_abs_delta, "^", color="C3", ms=4, label="max |Delta| per bin")
    grid = np.logspace(P_EDGES[0], 0, 200)
    for key, style in (("eps_implied_q50", ":"), ("eps_implied_q99", "--")):
        e = d.summary.get(key)
        if e is not None and np.isfinite(e):
            ax.plot(grid, mismatch_bound(torch.from_numpy(grid), e, "exact").numpy(), "k" + style,
                    label=f"M3 bound, eps = {e:.3g} ({key[-3:]})")
    ax.set(xscale="log", yscale="log", xlabel="trainer p of the sampled token",
           ylabel="|Delta| = |log pi_roll - log pi_train|",
           title="Token mismatch against p (DVP M3)")
    ax.legend(fontsize=7, loc="lower left")
    i, j = np.nonzero(h)
    d.points["envelope_hist_table"] = pd.DataFrame({
        "p_lo": 10 ** P_EDGES[i], "p_hi": 10 ** P_EDGES[i + 1], "abs_lo": 10 ** ABS_EDGES[j],
        "abs_hi": 10 ** ABS_EDGES[j + 1], "tokens": h[i, j].astype(int)})
    return fig, t


def _bias(d: Diagnosis, plt):
    t = d.tables["tail_bias"]
    t = t[t.tokens >= 2]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.errorbar(t.p_mean, t.mean_delta, yerr=2 * t.se_delta, fmt="o", ms=4, capsize=2)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xscale="log", xlabel="trainer p of the sampled token",
           ylabel="mean Delta (+- 2 se)", title="Tail bias: log pi_roll - log pi_train (M4/M5)")
    return fig, d.tables["tail_bias"]


def _accumulation(d: Diagnosis, plt):
    import pandas as pd

    pts, t = d.points["accumulation"], d.tables["accumulation"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.8), sharey=True)
    a.plot(pts.n_tail, pts.log_ratio, ".", alpha=0.3, ms=3)
    a.plot(t.mean_n_tail, t.mean_log_ratio, "o-", color="C3", label="mean per group")
    a.set(xlabel="tail tokens in the response", ylabel="sum_t log rho = log pi_train/pi_roll",
          title="M6: drift with tail tokens")
    a.legend(fontsize=7)
    b.plot(np.sqrt(pts["T"]), pts.log_ratio, ".", alpha=0.3, ms=3, color="C2")
    b.set(xlabel="sqrt(response length)", title="... or with sqrt(T)")
    data = pd.concat([pts.assign(kind="response"), t.assign(kind="group")], ignore_index=True)
    return fig, data


def _trm(d: Diagnosis, plt):
    t = d.tables["trm"]
    th, ln = t[t.kind == "threshold"], t[t.kind == "length"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    a.plot(th.threshold, th.accept_max_k2, "o-", ms=3, label="max_t k2 <= delta_max")
    a.plot(th.threshold, th.accept_avg_k3, "s-", ms=3, label="mean_t k3 <= delta_avg")
    for key, c in (("trm_delta_max", "C0"), ("trm_delta_avg", "C1")):
        a.axvline(d.summary[key], color=c, ls=":", lw=1)
    a.set(xscale="log", xlabel="threshold", ylabel="responses kept",
          title="TRM acceptance (T12)", ylim=(-0.02, 1.02))
    a.legend(fontsize=7)
    mid = (ln.length_lo + ln.length_hi) / 2
    b.plot(mid, ln.accept_max_k2, "o-", label="measured (max k2)")
    b.plot(mid, ln.predicted_iid, "k--", label="(1 - q)^T")
    b.set(xlabel="response length (group mean of its range)", ylabel="responses kept",
          ylim=(-0.02, 1.02),
          title="Length bias")
    b.legend(fontsize=7)
    return fig, t


def _dvp(d: Diagnosis, plt):
    t = d.tables["dvp"]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    a.plot(t.rho, t.pruned_token_frac, "o-", label="sampled tokens pruned")
    a.plot(t.rho, t.abs_delta_share, "s-", label="share of |Delta| they carry")
    a.plot(t.rho, t.mean_pruned_mass, "^-", label="mean pruned mass m")
    a.set(xscale="log", xlabel="min-p ratio rho", title="DVP's pruning at several rho (P2/P4)")
    a.set_yscale("symlog", linthresh=1e-8)
    a.set_ylim(bottom=0)                                   # every quantity here is >= 0
    a.legend(fontsize=7)
    return fig, t


def _steps(d: Diagnosis, plt):
    t = d.tables["steps"]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    for col in ("k1", "k3", "abs_delta_mean"):
        a.plot(t.step, t[col], "o-", ms=3, label=col)
    a.set(xlabel="step", yscale="symlog", title="Mismatch monitors over steps")
    a.set_yscale("symlog", linthresh=1e-8)
    a.legend(fontsize=7)
    return fig, t


def _ratios(d: Diagnosis, plt):
    t, c = d.tables["ratios"], d.summary["ratio_caps"]
    fig, a = plt.subplots(figsize=(6.4, 3.8))
    a.plot(t.c, t.frac_rho_above_c, "o-", ms=3, label="rho > c")
    a.plot(t.c, t.frac_rho_below_1_over_c, "s-", ms=3, label="rho < 1/c")
    a.axvline(c["tis_cap"], color="C3", ls=":", lw=1, label=f"TIS cap {c['tis_cap']:g}")
    a.axvline(1 / c["band_low"], color="C2", ls="--", lw=1,
              label=f"band [{c['band_low']:g}, {c['band_high']:g}]")
    a.set(xscale="log", xlabel="c", ylabel="fraction of tokens",
          title="Raw importance ratios rho = pi_train / pi_roll")
    a.set_yscale("symlog", linthresh=1e-6)
    a.set_ylim(bottom=0)
    a.legend(fontsize=7)
    return fig, t


# --- HTML -------------------------------------------------------------------------------------

def render_html(d: Diagnosis, figures: dict[str, str], inputs: list[Path]) -> str:
    """The report: inputs, the summary, then each section's verdict lines, figure and CSV."""
    e = html.escape
    rows = "".join(f"<tr><td>{e(k)}</td><td>{e(_show(v))}</td></tr>"
                   for k, v in _clean(d.summary).items()
                   if k not in ("m6", "dvp", "faults", "bottom_line"))
    parts = [f"<h1>tailtheory diagnose</h1><p>{e(inputs_line(inputs))}</p>",
             f"<h2>Summary</h2><table>{rows}</table>"
             "<p>Delta = log pi_roll - log pi_train of the sampled token (inference minus "
             "trainer); p is the trainer's probability. Every key is defined in "
             "docs/diagnose.md.</p>"]
    for name, title, claims in SECTIONS:
        lines = "".join(f"<li>{e(x)}</li>" for x in d.verdicts.get(name, []))
        fig = (f'<p><img src="{figures[name]}" alt="{e(title)}"></p><p>data: '
               f'<a href="{name}.csv">{name}.csv</a></p>' if name in figures else "")
        parts.append(f"<h2>{e(title)}</h2><p>claims: {e(claims)}</p><ul>{lines}</ul>{fig}")
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "td{padding:0 1em;font-family:monospace}img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>tailtheory diagnose"
            f"</title><style>{style}</style></head><body>{''.join(parts)}</body></html>\n")


INPUTS_SHOWN = 3
"""The report's header names this many dump files at each end of the list."""


def inputs_line(inputs: list[Path]) -> str:
    """The dumps read, in one line: their count, their common folder, and the first and last
    :data:`INPUTS_SHOWN` names relative to it (every name when there are at most
    ``2 * INPUTS_SHOWN``); ``summary.json`` has the count."""
    paths = [str(p) for p in inputs]
    if not paths:
        return "0 dumps."
    if len(paths) == 1:
        return f"1 dump: {paths[0]}"
    try:
        common = os.path.commonpath([os.path.abspath(p) for p in paths])
    except ValueError:                                  # different drives
        common = ""
    rel = [os.path.relpath(os.path.abspath(p), common) if common else p for p in paths]
    k = INPUTS_SHOWN
    names = (", ".join(rel) if len(rel) <= 2 * k else
             f"{', '.join(rel[:k])}, ... ({len(rel) - 2 * k} more) ..., {', '.join(rel[-k:])}")
    return f"{len(paths)} dumps" + (f" in {common}" if common else "") + f": {names}"


def _show(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return json.dumps(v) if isinstance(v, dict) else str(v)
