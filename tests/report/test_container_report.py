"""The HTML report's container section: each comparison's container ÷ bare ratio, interval and verdict — the
terminal's rows (report.container.container_rows) on the stored runs — with stacks that differ flagged; no
section where no run was part of a comparison."""

from __future__ import annotations

from html import escape

import pytest
from _report_runs import TINY_LSTM, save_variants, stored

from dlbench.cli.app import main
from dlbench.report.container import container_rows, container_table
from dlbench.store import RunFilter


@pytest.fixture(scope="module")
def one_run_db(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("container_report") / "runs.db")
    assert main(["run", *TINY_LSTM, "--no-telemetry", "--db", db]) == 0
    return db


def comparison(db: str, base: dict, session: str, bare: list[float], boxed: list[float], torch: str | None = None,
               minutes: float = 0) -> None:
    """Round r of ``session``: a bare run at base × bare[r] and a podman run at base × boxed[r] (the image's torch
    ``torch`` when given)."""
    for r, (b, c) in enumerate(zip(bare, boxed)):
        tags = {"bvc": session, "bvc_round": str(r)}
        save_variants(db, base, [b], tags=tags | {"container": "bare"}, minutes=minutes + 2 * r)
        [run] = save_variants(db, base, [c], tags=tags | {"container": "podman"}, container="podman",
                              image="localhost/dlbench:test", torch=torch, minutes=minutes + 2 * r + 1)
        assert run["env"]["container"]["runtime"] == "podman"


def report(db: str, out) -> str:
    assert main(["report", "--db", db, "--out", str(out), "--telemetry-runs", "0"]) == 0
    return out.read_text()


def test_no_comparison_no_container_section(one_run_db, tmp_path):
    assert 'id="container"' not in report(one_run_db, tmp_path / "r.html")


def test_each_comparison_shows_the_terminal_rows_with_differing_stacks_flagged(one_run_db, tmp_path):
    db = str(tmp_path / "runs.db")
    [base] = stored(one_run_db)
    save_variants(db, base, [1.0])  # an ordinary run beside the comparisons: in no row
    comparison(db, base, "same", [1.0, 1.01, 0.99], [0.96, 0.97, 0.95])
    comparison(db, base, "other", [1.0, 1.0], [0.99, 1.02], torch="2.13.0+cpu", minutes=30)
    text = report(db, tmp_path / "r.html")
    section = text[text.index('<section id="container">'):]
    section = section[:section.index("</section>")].replace("<wbr>", "")  # the text as read (<wbr>: where it may wrap)
    runs = stored(db, RunFilter())
    for session in ("same", "other"):
        [row] = container_rows([r for r in runs if r["spec"]["tags"].get("bvc") == session])
        header, [cells] = container_table([row])
        assert f"bvc={session}" in section
        for cell in cells:  # ratio with its interval, each side's throughput, the verdict: as the terminal prints them
            assert escape(cell) in section
    same = container_rows([r for r in runs if r["spec"]["tags"].get("bvc") == "same"])[0]
    assert same.pairs == 3 and same.low < same.ratio < same.high < 1 and not same.stacks_differ
    assert f"costs {1 - same.ratio:.1%}, more than the 3% goal" in section
    assert '<tr class="slower">' in section
    other = container_rows([r for r in runs if r["spec"]["tags"].get("bvc") == "other"])[0]
    assert other.pairs == 2 and other.stacks_differ  # the image's torch is another build: said first, highlighted
    host_torch = base["env"]["torch"]["version"]
    assert other.stacks_differ == (f"torch {host_torch} on the host vs 2.13.0+cpu in the image",)
    assert '<tr class="diff">' in section and escape(f"stacks differ ({other.stacks_differ[0]}): not the container") in section
    # the newer comparison first
    assert section.index("bvc=other") < section.index("bvc=same")


def test_the_host_side_is_named_as_the_environments_section_names_it(one_run_db, tmp_path):
    # issue 45: on a host that is itself a container (this VM has /.dockerenv) Environments said "docker" and the
    # container section "bare"; both now read frame.environment
    from dlbench.report.frame import environment

    db = str(tmp_path / "runs.db")
    [base] = stored(one_run_db)
    comparison(db, base, "s", [1.0, 1.0], [0.99, 1.0])
    text = report(db, tmp_path / "r.html")
    host = environment(base)["container"]  # "docker" here, "bare metal" on a host that is not a container
    envs = text[text.index('<section id="environments">'):]
    envs = envs[:envs.index("</section>")]
    section = text[text.index('<section id="container">'):]
    assert f"<td>{escape(host)}</td>" in envs
    assert f"the host side ran in: {escape(host)})" in section and escape(f"host ({host}) samples/s") in section
    assert ">bare samples/s<" not in section
