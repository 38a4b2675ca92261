"""One element of a study's SLURM job array: several runs in turn, requeued when preempted.

submitit pickles an :class:`ArrayElement` with its runs (:class:`~tailtheory.experiments.remote.RunJob`
s) into its folder; a node runs it and pickles back the records. On preemption or timeout SLURM
signals the job and submitit calls :meth:`ArrayElement.checkpoint`, which requeues the same
element (submitit's :class:`~submitit.helpers.Checkpointable`): the runs it finished before are
found in the node's run cache (or the shared one) and not trained again.
"""

from __future__ import annotations

import submitit

from tailtheory.experiments.remote import run_jobs


class ArrayElement(submitit.helpers.Checkpointable):
    """``element(jobs) -> records``: :func:`~tailtheory.experiments.remote.run_jobs`,
    requeued with the same jobs on preemption (submitit's default ``checkpoint``)."""

    def __call__(self, jobs: list) -> list[dict]:
        return run_jobs(jobs)
