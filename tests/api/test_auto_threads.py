"""``--threads auto`` (the default): the cores idle as the run starts, at least one, recorded with why."""

import re

from hypothesis import given, strategies as st

from dlbench.api.resolve import resolve_train, threads_for
from dlbench.spec import RunSpec

TINY = {"workload": "lstm", "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}, "batch_size": 4,
        "steps": 2, "warmup": 1}


@given(cores=st.integers(1, 256), processes=st.integers(1, 64), idle_share=st.floats(0.0, 1.0))
def test_the_pick_is_at_least_one_and_never_more_than_the_idle_share(cores, processes, idle_share):
    idle = cores * idle_share
    threads = threads_for(idle, cores, processes)
    assert threads >= 1
    assert threads <= max(1, cores // processes)
    assert threads == 1 or threads * processes <= idle + 0.25  # more than one only where the cores are idle


@given(cores=st.integers(1, 256), processes=st.integers(1, 64))
def test_an_idle_host_gives_every_core(cores, processes):
    assert threads_for(float(cores), cores, processes) == max(1, cores // processes)


@given(cores=st.integers(1, 64), low=st.floats(0.0, 1.0), high=st.floats(0.0, 1.0))
def test_more_idle_cores_never_give_fewer_threads(cores, low, high):
    low, high = sorted((low, high))
    assert threads_for(cores * low, cores, 1) <= threads_for(cores * high, cores, 1)


def test_auto_is_recorded_with_why_and_a_number_stays_exact():
    auto = resolve_train(RunSpec(**TINY))
    said = re.search(r"--threads auto: (\d+) thread\(s\) per process; ([\d.]+) of (\d+) core\(s\) idle",
                     auto.record_spec["threads_auto"])
    assert said is not None
    assert auto.record_spec["threads"] == auto.threads == auto.spec.threads == int(said[1])  # the run applies the pick
    assert 1 <= auto.threads <= int(said[3])
    exact = resolve_train(RunSpec(**TINY, threads=3))
    assert exact.threads == exact.record_spec["threads"] == 3 and exact.record_spec["threads_auto"] is None
    assert RunSpec(**TINY, threads="auto").threads is None


def test_bare_vs_container_picks_auto_once_so_both_sides_run_the_same_threads():
    """Each run picking its own would follow the host's load: bare 2 threads, the container 1 (CI's busy host
    split a pair of runs that way), a stack difference rather than the container's cost."""
    from dlbench.api import resolve
    from dlbench.api.bare_vs_container import pair_specs, same_threads
    from dlbench.spec import ContainerSpec

    auto, fixed = RunSpec(**TINY), RunSpec(**TINY, threads=3)
    picked, kept = same_threads([auto, fixed])
    assert kept.threads == 3 and 1 <= picked.threads <= resolve.usable_cores()
    bare, boxed = pair_specs(picked, ContainerSpec(image="localhost/dlbench:test"), "s", 0)
    assert bare.threads == boxed.threads == picked.threads and boxed.container is not None and bare.container is None
