"""How a study's runs leave this machine: the executors' names, options and command-line flags.

``tailtheory study NAME --executor local|ray|slurm`` and its flags (:func:`add_cluster_arguments`)
become one :class:`ClusterOptions` (:func:`cluster_options`), checked once here; the backends
that use them are :mod:`tailtheory.experiments.executors`. Kept apart and light (no torch), so
that building the command line imports nothing heavy.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

EXECUTORS = ("local", "ray", "slurm")
"""The backends of ``tailtheory study --executor``; ``local`` is the default."""

MAX_RETRIES = 3
"""Ray: how many times a run whose worker or node was lost is started again (Ray's default)."""

OOM_RETRIES = 3
"""Ray: how many times a run killed by Ray's memory monitor is started again (Ray's own default
retries those for ever; a run that outgrows its node's memory must stop and be reported)."""

SUBMITIT_FOLDER = "cache/submitit"
"""submitit's folder (pickled jobs, logs, results) when none is given: relative to the working
directory; on a cluster it must be on a filesystem every node sees."""


@dataclass(frozen=True)
class ClusterOptions:
    """How a study's runs leave this machine (``tailtheory study`` flags of the same names)."""

    address: str | None = None
    """Ray: the address of a running cluster (``None``: ``RAY_ADDRESS``, else a local instance)."""
    folder: str = SUBMITIT_FOLDER
    """SLURM: submitit's folder, shared with the nodes."""
    runs_per_job: int = 1
    """SLURM: runs trained one after another by each element of the job array."""
    time_min: int = 60
    """SLURM: each array element's time limit, in minutes (``--time``)."""
    partition: str | None = None
    """SLURM: the partition (``--partition``; ``None``: the cluster's default)."""
    per_gpu: int = 1
    """Runs packed on each GPU when the runs' device is ``cuda`` (Ray: ``num_gpus=1/K``)."""
    device: str | None = None
    """The device every run trains on (``None``: each config's own)."""
    cache: str | None = None
    """A run cache every node shares (checkpoints stay there); ``None``: each worker's own."""
    max_retries: int = MAX_RETRIES
    """Ray: restarts of a run whose worker was lost (:data:`MAX_RETRIES`)."""
    cluster: str | None = None
    """submitit's cluster: ``None`` (SLURM when ``sbatch`` is found, else submitit's local
    executor), ``"local"`` or ``"debug"`` (in this process; tests)."""

    def __post_init__(self):
        for name in ("runs_per_job", "time_min", "per_gpu"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {self.max_retries!r}")


def check_executor(name: str) -> str:
    """``name`` if it is one of :data:`EXECUTORS`, else one line naming them."""
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; executors: {', '.join(EXECUTORS)}")
    return name


def add_cluster_arguments(parser) -> None:
    """``tailtheory study``'s flags of :class:`ClusterOptions`, in their own group."""
    c = parser.add_argument_group("where the runs train (docs/usage.md, 'Running a study on a "
                                  "cluster')")
    c.add_argument("--executor", default="local",
                   help="local (worker processes of this machine), ray (Ray tasks; "
                        "tailtheory[ray]) or slurm (a submitit job array; tailtheory[slurm])")
    c.add_argument("--address", help="ray: a running cluster's address (default: RAY_ADDRESS, "
                                     "else a local Ray instance)")
    c.add_argument("--runs-per-job", type=int, default=1,
                   help="slurm: runs trained one after another by each array element")
    c.add_argument("--time", type=int, default=60, help="slurm: each array element's time "
                                                        "limit, minutes")
    c.add_argument("--partition", help="slurm: the partition (default: the cluster's)")
    c.add_argument("--submitit-folder", default=SUBMITIT_FOLDER,
                   help="slurm: submitit's folder, on a filesystem the nodes share")
    c.add_argument("--device", choices=("cpu", "cuda", "auto"),
                   help="train every run there (default: each config's device)")
    c.add_argument("--per-gpu", type=int, default=1,
                   help="with --device cuda: runs packed on each visible GPU")
    c.add_argument("--shared-cache", help="ray, slurm: a run cache every node sees (checkpoints "
                                          "kept there; default: each worker's own disk)")


def cluster_options(args: argparse.Namespace) -> ClusterOptions:
    """The :class:`ClusterOptions` of :func:`add_cluster_arguments`' flags (a namespace without
    them, as ``tailtheory measure`` builds one, takes the defaults)."""
    get = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    return ClusterOptions(address=get("address"), folder=get("submitit_folder", SUBMITIT_FOLDER),
                          runs_per_job=get("runs_per_job", 1), time_min=get("time", 60),
                          partition=get("partition"), per_gpu=get("per_gpu", 1),
                          device=get("device"), cache=get("shared_cache"))
