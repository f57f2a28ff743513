"""The launch options: the same on every command, from flags, a config file's ``launcher:`` key or the
site's config file (flags win); checked with --dry-run, which needs no cluster and submits nothing."""

from __future__ import annotations

from dlbench.cli.app import main

TINY = ["-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "2"]


def dry_run(capsys, monkeypatch, tmp_path, *argv: str) -> str:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DLBENCH_JOBS_DIR", str(tmp_path / "jobs"))
    code = main([*argv, "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "nothing submitted" in err and not (tmp_path / "jobs").exists()
    return out


def test_a_config_files_launcher_key_applies_and_flags_override_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "none.yaml"))
    config = tmp_path / "c.yaml"
    config.write_text("workload: lstm\nparams: {seq_len: 4}\nlauncher:\n  name: slurm\n  partition: gpu\n"
                      "  account: m1234\n  time: '10'\n  gpus_per_node: 4\n")
    out = dry_run(capsys, monkeypatch, tmp_path, "run", "--config", str(config), "--time", "00:20:00")
    lines = out.splitlines()
    assert "#SBATCH --partition=gpu" in lines and "#SBATCH --account=m1234" in lines
    assert "#SBATCH --time=00:20:00" in lines and "#SBATCH --gpus-per-node=4" in lines


def test_the_site_config_chooses_the_launcher_for_every_command(capsys, monkeypatch, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("launcher:\n  name: slurm\n  qos: debug\n")
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(site))
    out = dry_run(capsys, monkeypatch, tmp_path, "comm", "--nproc-per-node", "2")
    assert "#SBATCH --qos=debug" in out.splitlines() and "#SBATCH --cpus-per-task=2" in out.splitlines()
    out = dry_run(capsys, monkeypatch, tmp_path, "suite", "quick", "--nproc-per-node", "1")
    assert any(line.startswith("#SBATCH --array=0-") for line in out.splitlines())  # one job array
    out = dry_run(capsys, monkeypatch, tmp_path, "run", "lstm", *TINY, "--launcher", "slurm", "--shared")
    assert "#SBATCH --exclusive" not in out.splitlines() and "#SBATCH --qos=debug" in out.splitlines()


def test_a_node_series_is_one_job_per_node_count(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "none.yaml"))
    out = dry_run(capsys, monkeypatch, tmp_path, "scale", "lstm", *TINY, "--launcher", "slurm", "--nodes", "1,2,4",
                  "--gpus-per-node", "4")
    nodes = [line for line in out.splitlines() if line.startswith("#SBATCH --nodes=")]
    assert nodes == ["#SBATCH --nodes=1", "#SBATCH --nodes=2", "#SBATCH --nodes=4"]
    assert out.count("#!/bin/bash") == 3 and "--array" not in out


def test_dry_run_and_no_wait_are_only_for_schedulers(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "none.yaml"))
    code = main(["run", "lstm", *TINY, "--dry-run"])
    _, err = capsys.readouterr()
    assert code == 2 and "--dry-run and --no-wait are for jobs submitted with --launcher slurm or k8s" in err


def test_launcher_torchrun_runs_even_one_process_through_torchrun(capsys, monkeypatch, tmp_path):
    """So that a series compares like with like: the 1-process point of a torchrun study is a torchrun
    rank too (a process group of one, gloo), not a plain process."""
    import json

    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "none.yaml"))
    code = main(["run", "lstm", *TINY, "--warmup", "1", "--threads", "1", "--launcher", "torchrun", "--no-store", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    record = json.loads(out)
    assert (record["spec"]["launcher"], record["spec"]["backend"], record["result"]["world_size"]) == ("torchrun", "gloo", 1)
    code = main(["run", "lstm", *TINY, "--warmup", "1", "--threads", "1", "--no-store", "--json"])
    assert code == 0 and json.loads(capsys.readouterr()[0])["spec"]["launcher"] == "local"  # the default: one process here


def test_launcher_local_with_several_processes_is_one_sentence(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "none.yaml"))
    code = main(["run", "lstm", *TINY, "--nproc", "2", "--launcher", "local", "--no-store"])
    _, err = capsys.readouterr()
    assert code == 2 and err.strip() == ("dlbench: error: --launcher local runs one process here, not --nproc 2 × "
                                         "--nnodes 1; use --launcher torchrun, or drop --nproc/--nnodes.")


def test_measure_comm_prints_only_the_series_on_dry_run_and_refuses_no_wait(capsys, monkeypatch, tmp_path):
    """--dry-run submits nothing, the all-reduce job included; --no-wait cannot wait for the bus bandwidth."""
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "none.yaml"))
    out = dry_run(capsys, monkeypatch, tmp_path, "scale", "lstm", *TINY, "--launcher", "slurm", "--nodes", "1,2",
                  "--nproc-per-node", "1", "--measure-comm")
    assert out.count("#!/bin/bash") == 2 and "dlbench-comm" not in out
    code = main(["scale", "lstm", *TINY, "--launcher", "slurm", "--nodes", "1,2", "--measure-comm", "--no-wait"])
    _, err = capsys.readouterr()
    assert code == 2 and "--measure-comm waits for the all-reduce result before the series; drop --no-wait" in err
    assert not (tmp_path / "jobs").exists()
