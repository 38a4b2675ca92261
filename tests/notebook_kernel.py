"""Executing notebooks in a Jupyter kernel from the tests (``test_notebook_outputs.py``'s nbclient
run and nbmake's runs of ``notebooks/*.ipynb``): the limits every wait gets, and a fix for a lost
wake-up in nbclient that stalled a cell until its timeout.

The lost wake-up. An explorer (``tailtheory.core.explore``) is an ``ipywidgets.interactive``,
whose figure lives in an Output widget. nbclient mimics a front end's Output widget
(``nbclient.output_widget.OutputWidget``): each output the kernel sends to it is echoed back to the
kernel as a ``comm_msg`` on the shell channel, while nbclient's poll for the cell's
``execute_reply`` on that same socket is pending. ``jupyter_client.Session.send`` sends through a
*synchronous* shadow of the asyncio shell socket, so pyzmq's asyncio layer does not see the send.
libzmq's send processes the socket's pending commands; when the ``execute_reply`` has just arrived
(the kernel sends it right after the widget's outputs), that consumes the edge-triggered
``zmq.FD`` signal, and nothing re-checks ``zmq.EVENTS``: the reply sits in the socket while the
poll waits on a file descriptor that will not fire again. Both processes idle until nbclient's
per-cell ``timeout`` expires; pyzmq's poll then checks the socket once more, finds the reply, and
the cell passes: 600 s lost with ``timeout=600``. Upstream: jupyter/nbclient#312 (open).

The fix (:func:`rearm_shell_after_widget_sends`): after each such send, read ``zmq.EVENTS``
through the asyncio socket, which is pyzmq's way of saying "look again": it schedules the
socket's event handler when a message is waiting, so the poll wakes at once. A real hang still
fails at the per-cell timeout below.
"""

from __future__ import annotations

import functools

CELL_TIMEOUT_S = 120
"""Per-cell limit of ``test_notebook_outputs.py``'s run of notebook 01: its slowest cell (the
verdict) takes 7 to 25 s on a busy 2-core CPU, so a cell past 2 minutes is a hang. nbmake's runs
keep its own default (300 s): with a cold run cache the training cells of notebooks 04 and 06 do
up to 4.5 minutes of real work on such a machine."""

KERNEL_LIMITS = dict(
    timeout=CELL_TIMEOUT_S,  # waiting for a cell's execute_reply
    startup_timeout=60,  # waiting for the kernel's kernel_info reply after it starts
    iopub_timeout=30,  # after the execute_reply, waiting for the cell's outputs and "idle"
    raise_on_iopub_timeout=True,  # a lost "idle" fails, naming IOPub, instead of dropping outputs
)
"""nbclient ``NotebookClient`` settings: every wait ends within about 2 minutes, with an error
that names what it waited for."""


def _rearm(publish_msg):
    @functools.wraps(publish_msg)
    def publish_and_rearm(self, *args, **kwargs):
        publish_msg(self, *args, **kwargs)
        import zmq.asyncio

        shell = getattr(getattr(self.kernel_client, "shell_channel", None), "socket", None)
        if isinstance(shell, zmq.asyncio.Socket) and not shell.closed:
            shell.get(zmq.EVENTS)  # schedules the pending poll's wake-up when a reply waits

    publish_and_rearm._rearms_shell = True
    return publish_and_rearm


def rearm_shell_after_widget_sends() -> None:
    """Patch nbclient's Output-widget mimic (every nbclient in this process, nbmake's included) so
    that its comm messages to the kernel no longer swallow the wake-up of the cell's
    ``execute_reply``. Idempotent."""
    from nbclient.output_widget import OutputWidget

    if not getattr(OutputWidget._publish_msg, "_rearms_shell", False):
        OutputWidget._publish_msg = _rearm(OutputWidget._publish_msg)
