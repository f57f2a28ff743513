"""A tiny workload that misbehaves on one rank at one step, for the fault tests; or, with ``pace_s``, whose
every step waits first — a run that goes on until a signal or a scheduler stops it without keeping a core busy
meanwhile (the suite's two workers share two cores). With ``mark_dir``, each rank creates ``rank<RANK>`` there at
its ``at_call``-th ``loss()`` call: a test waits for the ranks to reach a step instead of guessing a time.

Registered through DLBENCH_WORKLOADS so that ranks launched in subprocesses can import it.
"""

import os
import signal
import time
from pathlib import Path

import torch
from torch import nn

from dlbench.catalog._base import Param, Workload


class Faulty(Workload):
    name = "faulty"
    description = "linear model that crashes, is killed or hangs on one rank"
    domain = "test"
    default_batch_size = 4
    params = {
        "fault": Param("none", "none | crash | kill | hang", choices=("none", "crash", "kill", "hang")),
        "rank": Param(1, "the rank that misbehaves"),
        "at_call": Param(3, "the loss() call at which it misbehaves"),
        "pace_s": Param(0.0, "seconds each step waits before it computes (the CPU idle meanwhile)", minimum=0.0),
        "mark_dir": Param("", "a directory where each rank creates rank<RANK> at its at_call-th loss() call"),
    }

    def __init__(self, **params):
        super().__init__(**params)
        self.calls = 0

    def build_model(self):
        return nn.Linear(8, 4)

    def sample(self, batch_size, generator):
        return torch.randn(batch_size, 8, generator=generator), torch.randint(0, 4, (batch_size,), generator=generator)

    def loss(self, model, batch):
        self.calls += 1
        time.sleep(self.params["pace_s"])
        if self.calls == self.params["at_call"] and self.params["mark_dir"]:
            Path(self.params["mark_dir"], f"rank{os.environ.get('RANK', '0')}").touch()
        if self.calls == self.params["at_call"] and int(os.environ.get("RANK", "0")) == self.params["rank"]:
            fault = self.params["fault"]
            if fault == "crash":
                raise ValueError("injected crash in the model")
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "hang":
                time.sleep(3600)
        x, y = batch
        return nn.functional.cross_entropy(model(x), y)
