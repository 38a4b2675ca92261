"""One probe family on one checkpoint: what ``tailtheory probe`` and the notebooks share.

:func:`run_probe` loads the checkpoint on its device and its tokenizer, reads the text windows
and runs the family (package docstring), returning its figures (the notebooks' figures, by the
same functions), its tables and the summary the command prints. :func:`write_result` saves them
into an output folder with a record of what it wrote (``probe_<family>.json``: configuration,
device, timing and the SHA-256 of every file), by which a later run knows its own files: a file
of the same name that the record does not vouch for is never replaced (:func:`out_files`).
:func:`show_probe` is the notebooks' cell. ``mismatch`` with ``attribute`` measures each knob's
mismatch instead (:mod:`tailtheory.probe.attribute`) and writes under its own name,
:data:`ATTRIBUTE`, so both can share a folder.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

TEXT_FAMILIES = ("mismatch", "pruning", "gradient")
"""The probe families on text windows (:func:`run_probe`)."""

FAMILIES = (*TEXT_FAMILIES, "decisiveness")
"""The probe families: :data:`TEXT_FAMILIES`, and ``decisiveness`` on a task's GRPO batch
(:mod:`tailtheory.probe.decisive`)."""

SOFTWARE = "tailtheory probe"
"""The ``Software`` text of the PNGs a probe writes, and the record's ``software`` field."""

ATTRIBUTE = "mismatch_attribute"
"""The name ``probe mismatch --attribute`` writes under (:mod:`tailtheory.probe.attribute`): its
record ``probe_mismatch_attribute.json`` and default folder, beside the plain probe's."""

FIGURES = {"mismatch": ("token_tail_mismatch_vs_p",), ATTRIBUTE: ("mismatch_attribution",),
           "pruning": ("token_tail_pruning_tradeoff", "p4_mass_shares"),
           "gradient": ("lopti_figure1", "lopti_figure3"),
           "decisiveness": ("decisive_split", "decisive_vs_p")}
"""Each probe's figures (PNG and CSV) by its output name (its family, or :data:`ATTRIBUTE`),
named as the notebooks name theirs."""

TABLES = {"mismatch": ("mismatch_summary",), ATTRIBUTE: (), "pruning": ("pruning_knee",),
          "gradient": ("gradient_bins", "gradient_l1_tokens"),
          "decisiveness": ("decisive_tokens", "decisive_bins", "decisive_roles",
                           "decisive_noise")}
"""Each probe's further tables (CSV), by output name."""

NOTEBOOK_SIZES = {"quick": (4, 128), "full": (8, 512)}
"""``(batch, length)`` of the notebooks' probes on each preset."""


def check_attribute(family: str, attribute: bool) -> None:
    """``--attribute`` belongs to the ``mismatch`` probe: anything else is one line."""
    if attribute and family != "mismatch":
        raise ValueError(f"--attribute is an option of the mismatch probe, not of {family}")


@dataclass(frozen=True)
class ProbeConfig:
    """One probe run; every field checked when it is built (one line of error each)."""

    family: str
    """A key of :data:`FAMILIES`."""
    model: str
    """A local Hugging Face checkpoint folder (``save_pretrained``) with its tokenizer."""
    device: str = "auto"
    """``auto``, ``cpu`` or ``cuda`` (``tailtheory.engine.devices``)."""
    batch: int = 8
    length: int = 512
    """``batch`` windows of ``length`` tokens (8 x 512: the probes' memory budget's size)."""
    seed: int = 0
    """Chooses the windows (and the gradient probe's advantage signs and L1 tokens, the
    attribution's other rows of its batches)."""
    attribute: bool = False
    """``mismatch`` only: each knob's mismatch against one reference
    (:mod:`tailtheory.probe.attribute`) instead of the three paths' envelopes."""
    attention: str | None = None
    """With ``attribute``: the attention arm's kernel (default ``sdpa``)."""

    def __post_init__(self):
        from tailtheory.core.checks import check_positive_int
        from tailtheory.engine.devices import DEVICES

        if self.family not in FAMILIES:
            raise ValueError(f"unknown probe {self.family!r}; valid probes: {', '.join(FAMILIES)}")
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; valid devices: "
                             f"{', '.join(DEVICES)}")
        check_positive_int(self.batch, "--batch")
        check_positive_int(self.length, "--length", 2)
        check_positive_int(self.seed, "--seed", 0)
        check_attribute(self.family, self.attribute)
        if self.attention is not None and not self.attribute:
            raise ValueError("--attention names the attention arm of --attribute; add "
                             "--attribute")
        if self.attribute:
            from tailtheory.probe.attribute import arms

            object.__setattr__(self, "attention", self.attention or "sdpa")
            arms(self.attention)                                # an unknown kernel: one line

    @property
    def output(self) -> str:
        """The name of the probe's files, record and default folder."""
        return ATTRIBUTE if self.attribute else self.family


@dataclass
class ProbeResult:
    """What a probe measured: figures ``name -> (fig, table)``, tables ``name -> table``, the
    printed ``summary``, and where (``device``, ``text``, ``seconds``)."""

    config: ProbeConfig
    device: str
    text: str
    figures: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)
    summary: object = None
    seconds: float = 0.0
    record: dict = field(default_factory=dict)
    """Further JSON-ready results the record holds (``result``)."""


def load_checkpoint(config: ProbeConfig):
    """``(model, input_ids, text)``: the float32 model on the resolved device, the text windows
    (on the CPU; the probes move them) and a sentence saying what they are."""
    import platform

    from tailtheory.core.models import load_lm, load_tokenizer
    from tailtheory.engine.devices import resolve_device
    from tailtheory.engine.start.text_windows import text_windows

    device = resolve_device(config.device)
    tokenizer = load_tokenizer(config.model)           # a missing path or tokenizer fails first
    model = load_lm(config.model, device=device)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and config.length > limit:
        raise ValueError(f"--length {config.length} exceeds the model's max_position_embeddings "
                         f"({limit})")
    ids = text_windows(tokenizer, config.batch, config.length, config.seed,
                       model.config.vocab_size)
    text = (f"{config.batch} windows of {config.length} tokens of the Python "
            f"{platform.python_version()} standard library's held-out source, read with the "
            f"model's tokenizer (seed {config.seed})")
    return model, ids, text


def _mismatch(model, ids, label: str, res: ProbeResult) -> None:
    from tailtheory.mismatch.chunked import mismatch_probe
    from tailtheory.mismatch.figures import plot_mismatch_points

    summary, points = mismatch_probe(model, ids)
    if len(points):
        res.figures["token_tail_mismatch_vs_p"] = plot_mismatch_points(points)
    res.tables["mismatch_summary"] = summary
    res.summary = summary[[c for c in MISMATCH_COLUMNS if c in summary]]


def _pruning(model, ids, label: str, res: ProbeResult) -> None:
    from tailtheory.pruning.chunked import pruning_probe
    from tailtheory.pruning.claims import MASS_NEGLIGIBLE
    from tailtheory.pruning.figures import plot_mass_shares, plot_pruning_tradeoff
    from tailtheory.pruning.sweep import pruning_knee

    import pandas as pd

    sweep, shares = pruning_probe(model, ids)
    with warnings.catch_warnings():   # nothing pruned at any rho (a near-uniform model): no
        warnings.filterwarnings("ignore", "Data has no positive values")  # log axis to draw
        fig = plot_pruning_tradeoff(sweep, MASS_NEGLIGIBLE)
    res.figures["token_tail_pruning_tradeoff"] = fig
    res.figures["p4_mass_shares"] = plot_mass_shares(
        {"settings": {label: {"shares": shares.to_dict("records")}}})
    res.tables["pruning_knee"] = pd.DataFrame([pruning_knee(sweep, MASS_NEGLIGIBLE)])
    res.summary = fig[1][["rho", "mass_mean", "kept_frac", "seq_kl", "seq_kl_left",
                          "abs_delta_max_left"]]


def _gradient(model, ids, label: str, res: ProbeResult) -> None:
    import pandas as pd

    from tailtheory.lopti.figures import BIN_LABELS, plot_figure1, plot_figure3, summary_table
    from tailtheory.lopti.text_probe import gradient_probe

    data = gradient_probe(model, ids, seed=res.config.seed)
    res.figures["lopti_figure1"] = plot_figure1(data, f"{label} on text")
    res.figures["lopti_figure3"] = plot_figure3(data)
    bins = summary_table(data)
    res.tables["gradient_bins"] = bins
    res.tables["gradient_l1_tokens"] = pd.DataFrame(data["batches"][0]["l1"])
    wide = bins[bins["bin"] != "all"].pivot(index="bin", columns="quantity", values="value")
    res.summary = wide.reindex(BIN_LABELS)[["token_frac", "grad_norm", "dpi_all_pos",
                                            "dpi_all_neg", "rise_GRPO", "l1_param_norm",
                                            "l1_logit_norm"]].reset_index()


MISMATCH_COLUMNS = ("path", "note", "mean_abs", "max_abs", "head_mean_abs", "tail_mean_abs",
                    "frac_head", "frac_tail", "mean_eps", "frac_under_exact", "max_ratio_exact")
"""The columns of the mismatch summary the command prints (the CSV holds them all)."""


def _attribute(model, ids, label: str, res: ProbeResult) -> None:
    from tailtheory.probe.attribute import REFERENCE, attribute_mismatch, plot_attribution

    table = attribute_mismatch(model, ids, res.config.attention, res.config.seed)
    res.figures["mismatch_attribution"] = plot_attribution(table)
    res.text += f"; against {REFERENCE}"
    res.summary = table[list(ATTRIBUTE_COLUMNS)]
    res.record = {"reference": REFERENCE,
                  "table": table.astype(object).where(table.notna(), None).to_dict("records")}


ATTRIBUTE_COLUMNS = ("arm", "note", "k3", "k3_se", "outside", "outside_low", "outside_high",
                     "equal", "m7_slope", "seconds")
"""The columns of the attribution the command prints (the CSV and the record hold them all)."""

_RUNNERS = {"mismatch": _mismatch, ATTRIBUTE: _attribute, "pruning": _pruning,
            "gradient": _gradient}


def run_probe(config: ProbeConfig) -> ProbeResult:
    """Load ``config.model`` and run ``config.family`` on its text windows (module docstring)."""
    if config.family not in _RUNNERS:
        raise ValueError(f"the {config.family} probe reads a task, not text windows: "
                         f"tailtheory.probe.decisive.run_decisiveness")
    t0 = time.perf_counter()
    model, ids, text = load_checkpoint(config)
    res = ProbeResult(config, str(next(model.parameters()).device), text)
    _RUNNERS[config.output](model, ids, Path(config.model).name, res)
    res.seconds = time.perf_counter() - t0
    return res


# ---- the output folder ------------------------------------------------------------------------

def record_name(family: str) -> str:
    return f"probe_{family}.json"


def out_files(family: str) -> list[str]:
    """The names a probe (``family``: its output name) writes into its output folder, its
    record last."""
    names = [f"{n}{ext}" for n in FIGURES[family] for ext in (".png", ".csv")]
    return names + [f"{n}.csv" for n in TABLES[family]] + [record_name(family)]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record(out: Path, family: str) -> dict | None:
    try:
        rec = json.loads((out / record_name(family)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("software") == SOFTWARE else None


def check_out_dir(out: str | Path, family: str) -> Path:
    """``out`` as a folder a probe may write into: missing or a folder, where each file the
    family writes is missing or was written by an earlier run of it (its record holds the
    file's SHA-256). Anything else is a ``ValueError`` naming it, before any work."""
    from tailtheory.core.io import check_out_file

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; name a folder (a new one, or one a probe "
                         f"wrote before)")
    rec = _record(out, family) if out.is_dir() else None
    hashes = (rec or {}).get("files", {})
    for name in out_files(family):
        ours = (lambda p: rec is not None) if name == record_name(family) else (
            lambda p: hashes.get(p.name) == _sha(p))
        check_out_file(out / name, ours, f"--out's file")
    return out


def write_result(res: ProbeResult, out: str | Path) -> list[Path]:
    """Save ``res``'s figures (PNG + CSV), tables (CSV) and its record into ``out``."""
    import matplotlib.pyplot as plt

    from tailtheory.core.io import atomic_write_json, atomic_write_text, save_figure
    from tailtheory.core.provenance import cpu_model

    out = check_out_dir(out, res.config.output)
    written = []
    for name, (fig, df) in res.figures.items():
        png = save_figure(fig, name, df, directory=out, software=SOFTWARE)
        plt.close(fig)
        written += [png, png.with_suffix(".csv")]
    for name, df in res.tables.items():
        written.append(atomic_write_text(out / f"{name}.csv",
                                         df.to_csv(index=False, float_format="%.8g")))
    rec = {"software": SOFTWARE, "config": asdict(res.config), "device": res.device,
           "cpu": cpu_model(), "text": res.text, "seconds": round(res.seconds, 2),
           "files": {p.name: _sha(p) for p in written}, **({"result": res.record}
                                                          if res.record else {})}
    written.append(atomic_write_json(out / record_name(res.config.output), rec))
    return written


def show_probe(family: str, model: str, device: str = "auto", preset: str = "quick"):
    """The notebooks' cell: run ``family`` on checkpoint ``model`` at the preset's size
    (:data:`NOTEBOOK_SIZES`), show its figures (saved as ``probe_<name>``) with a caption, and
    return its summary table."""
    from tailtheory.core.display import show_figure

    batch, length = NOTEBOOK_SIZES[preset]
    res = run_probe(ProbeConfig(family, str(model), device, batch, length))
    caption = (f"Evidence: measured by this run on the checkpoint {model} ({res.device}): "
               f"{res.text}; the same as `tailtheory probe {family} --model {model} --batch "
               f"{batch} --length {length}`.")
    for name, (fig, df) in res.figures.items():
        show_figure(fig, f"probe_{name}", df, caption)
    return res.summary
