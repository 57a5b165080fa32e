"""The kernel client nbgrader's Execute uses when grading (``nbgrader_settings`` selects it).

nbclient waits for a cell's reply with one ``poll`` on the shell socket that lasts up to
the cell timeout. pyzmq's asyncio poll sometimes misses the wake-up of a message that has
already arrived (jupyter/nbclient#312, seen with the widget cells of the chapters); the
poll then returns only at its timeout, so a 6 s notebook took 186 s, more often when
several kernels run at once. This client polls in short slices up to the same deadline:
a missed wake-up costs at most one slice, and timeouts behave as before.
"""

import time
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from traitlets import Type

POLL_SLICE_S = 0.5


class SlicedPollChannel(AsyncZMQSocketChannel):
    async def get_msg(self, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE_S if deadline is None else deadline - time.monotonic()
            try:
                return await super().get_msg(timeout=max(0.0, min(POLL_SLICE_S, left)))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise


class GradingKernelClient(AsyncKernelClient):
    shell_channel_class = Type(SlicedPollChannel)
    iopub_channel_class = Type(SlicedPollChannel)
