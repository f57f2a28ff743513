"""Benchmarks in a real container (podman): a run in the image records the image's digest and the versions seen
inside; two ranks under torchrun; the comparison with bare metal; and the images that must be refused (none,
one without dlbench, one with another dlbench version) with one sentence, exit 2 and nothing recorded."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

TINY = ["-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "3", "--warmup", "1",
        "--no-telemetry"]


def dlbench(*argv: str, db, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlbench", *argv, "--db", str(db)], capture_output=True, text=True,
                          timeout=timeout_s, env=dict(os.environ, DLBENCH_SITE_CONFIG="/nonexistent"))


def query(*argv: str, db) -> subprocess.CompletedProcess:
    """A command that only reads the store, run in this process: a fresh interpreter is not what it proves."""
    from dlbench.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    site = os.environ.get("DLBENCH_SITE_CONFIG")
    os.environ["DLBENCH_SITE_CONFIG"] = "/nonexistent"  # as for dlbench()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*argv, "--db", str(db)])
    finally:
        if site is None:
            del os.environ["DLBENCH_SITE_CONFIG"]
        else:
            os.environ["DLBENCH_SITE_CONFIG"] = site
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def stored(db) -> list[dict]:
    if not db.exists():
        return []
    out = query("results", "--json", db=db)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def digest_of(image: str) -> str:
    out = subprocess.run(["podman", "image", "inspect", "--format", "{{.Digest}}", image], capture_output=True, text=True,
                         check=True, timeout=120)  # podman waits on its storage lock: bounded
    return out.stdout.strip()


def test_a_run_in_the_image_is_recorded_here_with_the_image_and_the_versions_inside(container_image, tmp_path):
    db = tmp_path / "runs.db"
    out = dlbench("run", "lstm", *TINY, "--container", container_image, "--json", db=db)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    container = record["env"]["container"]
    assert record["status"] == "ok" and record["result"]["samples_per_s"] > 0
    assert container["runtime"] == "podman" and container["in_container"] and container["image"] == container_image
    assert container["digest"] == digest_of(container_image)
    assert record["env"]["torch"]["version"] == "2.13.0+cpu"  # the image's torch, not the host's
    assert record["env"]["python"]["version"].startswith("3.11.")
    assert record["spec"]["container"] == {"image": container_image, "runtime": "podman"}
    assert record["spec"]["tags"]["container"] == "podman" and "host_load" in record["env"]
    assert [r["id"] for r in stored(db)] == [record["id"]]  # stored by the host's pipeline


def test_two_ranks_run_under_torchrun_in_the_image(container_image, tmp_path):
    db = tmp_path / "runs.db"
    out = dlbench("run", "lstm", *TINY, "--nproc", "2", "--threads", "1", "--container", container_image, "--json", db=db)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["status"] == "ok" and record["spec"]["world_size"] == 2 and record["spec"]["launcher"] == "torchrun"
    assert record["env"]["container"]["digest"] == digest_of(container_image)
    assert len(record["result"]["per_rank"]) == 2


def test_bare_against_container_pairs_the_runs_and_says_the_stacks_differ(container_image, tmp_path):
    db = tmp_path / "runs.db"
    out = dlbench("bare-vs-container", container_image, "lstm", *TINY, "--threads", "1", "--repeats", "1", "--json",
                  db=db)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (row,) = doc["rows"]
    assert row["pairs"] == 1 and row["low"] is None
    assert row["ratio"] == pytest.approx(row["container_samples_per_s"] / row["bare_samples_per_s"])
    # the host's torch (the CUDA build here) is not the image's CPU wheel: the verdict says so first
    assert row["verdict"].startswith("stacks differ (torch ") and "2.13.0+cpu in the image" in row["verdict"]
    compared = query("compare", "container=bare", "container=podman", "--json", db=db)
    assert compared.returncode == 0, compared.stderr
    assert "lstm" in compared.stdout


def test_bare_against_container_says_a_nersc_config_runs_dlbenchs_model(container_image, tmp_path):
    """``bare-vs-container --config`` of a NERSC pytorch-benchmarks config says what ``run --config`` says (issue 45
    item 4): it runs dlbench's implementation of that model, not the script, and how to time the script."""
    import yaml

    config = tmp_path / "lstm.yaml"  # the keys of NERSC's configs/lstm.yaml (tests/test_nersc_configs.py), its sizes tiny
    config.write_text(yaml.safe_dump({
        "trainer": "generic", "output_dir": "results/lstm",
        "data_config": {"name": "dummy", "n_train": 64, "n_valid": 64, "input_shape": [4, 8], "n_classes": 4,
                        "batch_size": 4, "use_dist_sampler_train": False, "use_dist_sampler_valid": False},
        "model_config": {"model_type": "lstm", "input_size": 8, "hidden_size": 8, "output_size": 4, "n_lstm_layers": 1,
                         "optimizer": "Adam", "learning_rate": 0.001},
        "train_config": {"n_epochs": 1}}, sort_keys=False))
    db = tmp_path / "runs.db"
    out = dlbench("bare-vs-container", container_image, "--config", str(config), "--steps", "3", "--warmup", "1",
                  "--threads", "1", "--repeats", "1", "--no-telemetry", "--json", db=db)
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if "NERSC pytorch-benchmarks config" in line]
    assert len(said) == 1  # once, though two runs (bare, podman) follow
    assert said[0].startswith(f"dlbench: {config} is a NERSC pytorch-benchmarks config; it runs dlbench's own lstm, "
                              "not NERSC's train.py: ")
    assert f"To time the script itself: dlbench run --exec --metric nersc -- python train.py {config}" in said[0]
    records = stored(db)
    assert sorted(r["tags"]["container"] for r in records) == ["bare", "podman"]
    assert all(r["workload"] == "lstm" and r["tags"]["implementation"] == "dlbench" for r in records)


def _derived(base: str, tag: str, command: str) -> str:
    """An image made from ``base`` by one RUN ``command`` (a thin layer, seconds)."""
    subprocess.run(["podman", "build", "-q", "-t", tag, "-f", "-", "."], input=f"FROM {base}\nRUN {command}\n",
                   text=True, capture_output=True, check=True, timeout=600)
    return tag


@pytest.mark.parametrize("bad,message", [
    ("missing", "is not in podman's image store; build it with 'dlbench image build --tag"),
    ("no_dlbench", "has no usable dlbench"),
    ("other_version", "holds dlbench 0.0.0-other, this is dlbench"),
])
def test_a_bad_image_is_one_sentence_exit_2_and_nothing_recorded(bad, message, container_image, tmp_path):
    images = {
        "missing": lambda: "localhost/dlbench-no-such-image:1",
        "no_dlbench": lambda: "localhost/dlbench-base:bookworm",
        "other_version": lambda: _derived(container_image, "localhost/dlbench-test:other-version",
                                          "sed -i 's/^__version__ = .*/__version__ = \"0.0.0-other\"/' "
                                          "/opt/dlbench/lib/python3.11/site-packages/dlbench/__init__.py"),
    }
    db = tmp_path / "runs.db"
    out = dlbench("run", "lstm", *TINY, "--container", images[bad](), db=db)
    assert out.returncode == 2 and message in out.stderr
    errors = [line for line in out.stderr.splitlines() if not line.startswith("dlbench: warning: ")]  # a busy host warns
    assert len(errors) == 1 and errors[0].startswith("dlbench: error: ")
    assert "Traceback" not in out.stderr and stored(db) == []
    if bad == "other_version":
        subprocess.run(["podman", "rmi", "localhost/dlbench-test:other-version"], capture_output=True, check=False, timeout=120)


def test_bare_against_container_runs_a_program_of_ours_on_both_sides(container_image, tmp_path):
    """``bare-vs-container IMAGE --exec -- python3 nersc_like.py``: the program (stdlib only: the host's python3 and the
    image's run it alike), found by a relative path in the directory dlbench runs in, runs bare and in the image (that
    directory mounted at its own path), both recorded."""
    from pathlib import Path

    program = Path(__file__).resolve().parents[1] / "data" / "exec" / "nersc_like.py"
    (tmp_path / "nersc_like.py").write_text(program.read_text())
    db = tmp_path / "runs.db"
    out = subprocess.run([sys.executable, "-m", "dlbench", "bare-vs-container", container_image, "--exec", "--repeats",
                          "1", "--no-telemetry", "--name", "mine", "--metric", "nersc", "--steps", "3", "--json", "--db",
                          str(db), "--", "python3", "nersc_like.py", "1000", "64", "0.05"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env=dict(os.environ, DLBENCH_SITE_CONFIG="/nonexistent"))
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["rows"]
    assert row["pairs"] == 1 and row["ratio"] == pytest.approx(row["container_samples_per_s"] / row["bare_samples_per_s"])
    records = stored(db)
    assert sorted(r["tags"]["container"] for r in records) == ["bare", "podman"]  # results --json: one row a run
    assert all(r["mode"] == "exec" and r["workload"] == "mine" for r in records)


@pytest.mark.parametrize(("program", "options", "source"), [
    (["nersc_like.py", "1000", "64", "0.05"], ["--metric", "nersc", "--warmup", "1", "--steps", "3"], "metric:nersc"),
    (["probe_train.py", "23", "0.04", "16", "2"], ["--warmup", "2"], "probe"),
])
def test_a_program_of_ours_runs_in_the_image_and_dlbenchs_rate_is_the_programs_own(container_image, tmp_path, program,
                                                                                    options, source):
    """``run --exec --container IMAGE``: the stand-in for NERSC's train.py read through ``--metric nersc``, and a loop
    edited with the probe (the image's dlbench), each run by the image's python3 in the directory dlbench runs in;
    dlbench's samples/s is the rate the program prints itself over the same steps (issue 40 item 5, in podman)."""
    from pathlib import Path

    (tmp_path / program[0]).write_text((Path(__file__).resolve().parents[1] / "data" / "exec" / program[0]).read_text())
    db = tmp_path / "runs.db"
    out = subprocess.run([sys.executable, "-m", "dlbench", "run", "--exec", "--container", container_image, "--name",
                          "nersc-like", "--no-telemetry", *options, "--json", "--db", str(db), "--", "python3", *program],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=dict(os.environ, DLBENCH_SITE_CONFIG="/nonexistent"))
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    result = record["result"]
    assert record["status"] == "ok" and result["throughput_from"] == source, result
    assert record["env"]["container"]["digest"] == digest_of(container_image) and record["spec"]["mode"] == "exec"
    tail = result["program"]["output_tail"]
    if source == "probe":
        own = float(re.search(r"own rate ([0-9.]+) samples/s over 20 steps", tail).group(1))
        assert result["steps"] == 20 and result["samples_per_s"] == pytest.approx(own, rel=0.02)  # timed by both
    else:
        printed = [float(v) for v in re.findall(r"rate ([0-9.e+]+) samples/s", tail)]
        assert result["metric_lines"] == 3 and result["program"]["stopped"] == "enough" and len(printed) >= 4
        own = 3 / sum(1 / rate for rate in printed[1:4])  # its lines 2–4 (the first is the warm-up): work over time
        assert result["samples_per_s"] == pytest.approx(own, rel=1e-6)
    (row,) = stored(db)
    assert row["id"] == record["id"] and row["workload"] == "nersc-like"
