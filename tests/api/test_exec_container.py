"""An exec run in a container, planned (pure: the argv dlbench would start) and paired with its bare twin by
``dlbench bare-vs-container --exec``; the podman run itself is in tests/container/test_container_runs.py."""

from __future__ import annotations

import json

import pytest

from dlbench.api.bare_vs_container import pair_specs
from dlbench.api.exec_job import resolve_exec
from dlbench.cli.app import main
from dlbench.launch._base import JOB_FILE, RANKS_DIR, job_document
from dlbench.launch.container import IMAGE_PYTHON
from dlbench.launch.torchrun import container_of, planned_argv
from dlbench.spec import ContainerSpec, ExecSpec

IMAGE = ContainerSpec(image="localhost/dlbench:test", runtime="podman")


def test_an_exec_run_in_a_container_is_torchrun_wrapped_in_the_image_with_its_directory_mounted(tmp_path):
    run = resolve_exec(ExecSpec(argv=["python3", "train.py", "--epochs", "1"], container=IMAGE, nproc=2, cwd=str(tmp_path)))
    assert run.launcher == "torchrun" and run.spec.container == IMAGE
    container = container_of(run)
    assert container.image == IMAGE.image and str(tmp_path.resolve()) in container.mounts
    workdir = tmp_path / "job"
    argv = planned_argv(run, workdir)
    assert argv[:2] == ("podman", "run") and f"--volume={tmp_path.resolve()}:{tmp_path.resolve()}" in argv
    inside = argv[argv.index(IMAGE.image) + 1:]
    assert inside[:3] == (IMAGE_PYTHON, "-m", "torch.distributed.run") and "--nproc-per-node" in inside
    assert inside[-4:] == ("-m", "dlbench.api.worker", str(workdir / JOB_FILE), str(workdir / RANKS_DIR))
    job = json.loads(job_document(run))  # what each rank in the image reads: the program and where it runs
    assert job["kind"] == "exec" and job["container"] is True
    assert job["spec"]["argv"] == ["python3", "train.py", "--epochs", "1"] and job["spec"]["cwd"] == str(tmp_path)


def test_the_program_in_a_container_is_the_images_and_runs_in_dlbenchs_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = resolve_exec(ExecSpec(argv=["python3-only-in-the-image", "t.py"], container=IMAGE))  # not checked here
    assert run.record_spec["exec"]["program"] == "python3-only-in-the-image"
    assert run.spec.cwd == str(tmp_path) and run.record_spec["exec"]["cwd"] == str(tmp_path)


def test_bare_and_container_runs_of_a_program_alternate_and_are_tagged(tmp_path):
    spec = ExecSpec(argv=["python3", "t.py"], tags={"who": "me"}, cwd=str(tmp_path))
    even, odd = pair_specs(spec, IMAGE, "s1", 0), pair_specs(spec, IMAGE, "s1", 1)
    assert [s.container for s in even] == [None, IMAGE] and [s.container for s in odd] == [IMAGE, None]
    assert all(s.torchrun and s.tags["bvc"] == "s1" and s.tags["who"] == "me" for s in even + odd)
    assert [s.tags["container"] for s in even] == ["bare", "podman"]
    bare = resolve_exec(even[0])
    assert container_of(bare) is None and planned_argv(bare, tmp_path)[1:3] == ("-m", "torch.distributed.run")


@pytest.mark.parametrize(("options", "sentence"), [
    (["lstm", "--exec"], "WORKLOAD does not apply to --exec"),
    (["--exec", "--threads", "2"], "--threads does not apply to --exec"),
    (["--name", "x"], "--name is for a program compared with --exec"),
    (["--exec", "--launcher", "k8s"], "a Kubernetes pod always runs in an image, so there is no bare side to compare"),
    (["--launcher", "slurm"], "--launcher slurm pairs your own program (--exec -- CMD)"),
    (["--exec", "--partition", "gpu"], "--partition is for pairs run as Slurm jobs (--exec --launcher slurm)"),
    (["--exec", "--launcher", "slurm", "--no-wait"], "--no-wait does not apply to bare-vs-container"),
])
def test_bare_vs_container_refuses_what_does_not_apply_to_exec(capsys, tmp_path, options, sentence):
    capsys.readouterr()
    code = main(["bare-vs-container", IMAGE.image, *options, "--db", str(tmp_path / "runs.db"), "--", "python3", "t.py"])
    err = capsys.readouterr().err
    assert code == 2 and sentence in err and not (tmp_path / "runs.db").exists()


def test_bare_vs_container_exec_pairs_real_runs_with_the_container_left_out(capsys, tmp_path, monkeypatch):
    """The command's whole path with real runs of our own program; only the image is left out (both sides run on
    the host: tests/container runs it in podman)."""
    import sys
    from pathlib import Path

    import dlbench.api.bare_vs_container as bvc
    import dlbench.launch.torchrun as torchrun

    monkeypatch.setattr(bvc, "inspect_image", lambda runtime, image: None)
    monkeypatch.setattr(torchrun, "container_of", lambda run, facts=None: None)
    program = Path(__file__).resolve().parents[1] / "data" / "exec" / "nersc_like.py"
    capsys.readouterr()
    code = main(["bare-vs-container", IMAGE.image, "--exec", "--repeats", "1", "--no-telemetry", "--name", "mine",
                 "--metric", "nersc", "--steps", "2", "--json", "--db", str(tmp_path / "runs.db"), "--",
                 sys.executable, str(program), "1000", "64", "0.05"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    (row,) = doc["rows"]
    assert row["key"].startswith("mine exec [") and row["pairs"] == 1 and len(doc["runs"]) == 2
    assert row["ratio"] == pytest.approx(row["container_samples_per_s"] / row["bare_samples_per_s"])
