"""One torch thread for every test here: these tests build the catalogue's models and take a step or two, and
check results, never speed. At torch's default (one thread per core) the OpenMP threads spin-wait for each other
on a loaded 2-core machine: inception_v3's one step at 75 px took 4.2 s of CPU on two threads and 0.18 s on one
(docs/testing.md, 'Keeping the suite quick')."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
