"""Hostile input, round two — the results store: ``store import`` trusts nothing, export paths stay inside.

Every file given to ``dlbench store import`` is checked against the run-record schema (ids of a fixed alphabet,
statuses of the enum, finite inputs, ``created_at`` a time, tags a mapping of text, …) before the store is even
opened: one sentence naming the file and the field, exit 2, the store byte for byte as it was. And an id such as
``../../../tmp/x`` in an older store cannot make ``tensorboard export`` write (or delete) outside ``--out``.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from hostile_corpus import Case, check, params

from dlbench.record import SCHEMA_VERSION
from dlbench.store import open_store

GOOD = {
    "schema_version": SCHEMA_VERSION, "id": "imported0001", "created_at": "2026-11-30T10:00:00+00:00", "status": "ok",
    "error": None, "spec": {"workload": "lstm", "device": "cpu", "batch_size": 4, "nproc": 1, "tags": {"k": "v"}},
    "env": {"hostname": "node1", "torch": {"version": "2.14.1"}},
    "result": {"samples_per_s": 100.0, "step_time_s": {"median": 0.1}}, "telemetry": None,
}
IMPORT = ["store", "import", "{tmp}/r.json"]


def changed(path: str, value) -> dict:
    """GOOD with the field at dotted ``path`` set to ``value`` (``...`` removes it)."""
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return doc


def record_file(doc, series=None) -> dict[str, bytes]:
    body = doc if series is None else {"record": doc, "series": series}
    return {"r.json": json.dumps(body).encode()}  # json.dumps writes NaN and Infinity as Python reads them


#: (case id, field path, value, what the sentence names)
FIELD_CASES = [
    ("id-number", "id", 5, "id 5"), ("id-empty", "id", "", "id ''"), ("id-null", "id", None, "id None"),
    ("id-path-traversal", "id", "../../../tmp/x", "id '../../../tmp/x'"), ("id-slash", "id", "a/b", "id 'a/b'"),
    ("id-newline", "id", "abc\ndef", "id 'abc\\ndef'"), ("id-too-long", "id", "a" * 33, "is not a run id"),
    ("id-dash-first", "id", "-rf", "id '-rf'"), ("id-space", "id", "ab cd", "id 'ab cd'"),
    ("id-markup", "id", "[/bold]", "id '[/bold]'"), ("id-percent", "id", "a%2e", "id 'a%2e'"),
    ("status-hacked", "status", "hacked", "status 'hacked'"), ("status-null", "status", None, "status None"),
    ("status-number", "status", 1, "status 1"), ("status-upper", "status", "OK", "status 'OK'"),
    ("created-at-number", "created_at", 5, "created_at 5"), ("created-at-word", "created_at", "yesterday", "created_at"),
    ("created-at-empty", "created_at", "", "created_at ''"), ("created-at-null", "created_at", None, "created_at None"),
    ("created-at-huge", "created_at", "2026-11-30" + "0" * 100, "created_at"),
    ("schema-version-2", "schema_version", 2, "schema_version 2"),
    ("schema-version-text", "schema_version", "1", "schema_version '1'"),
    ("schema-version-bool", "schema_version", True, "schema_version True"),
    ("spec-list", "spec", ["lstm"], "spec must be a JSON object"),
    ("spec-workload-missing", "spec.workload", ..., "spec.workload"),
    ("spec-workload-number", "spec.workload", 5, "spec.workload 5"),
    ("spec-workload-empty", "spec.workload", "", "spec.workload ''"),
    ("spec-workload-long", "spec.workload", "w" * 200, "spec.workload"),
    ("spec-device-number", "spec.device", 5, "spec.device 5"),
    ("tags-list", "spec.tags", ["a=b"], "spec.tags"), ("tags-number-value", "spec.tags", {"a": 1}, "spec.tags"),
    ("tags-null-value", "spec.tags", {"a": None}, "spec.tags"), ("tags-empty-key", "spec.tags", {"": "x"}, "spec.tags"),
    ("tags-long-value", "spec.tags", {"a": "v" * 600}, "spec.tags"),
    ("batch-size-text", "spec.batch_size", "4", "spec.batch_size '4'"),
    ("batch-size-fraction", "spec.batch_size", 1.5, "spec.batch_size 1.5"),
    ("batch-size-huge", "spec.batch_size", 10**30, "spec.batch_size"),
    ("nproc-negative", "spec.nproc", -1, "spec.nproc -1"),
    ("env-list", "env", [1], "env must be a JSON object"), ("env-hostname-number", "env.hostname", 5, "env.hostname"),
    ("env-torch-text", "env.torch", "2.1", "env.torch"),
    ("result-list", "result", [1], "result must be a JSON object"),
    ("rate-text", "result.samples_per_s", "fast", "result.samples_per_s"),
    ("rate-huge-int", "result.samples_per_s", 10**400, "result.samples_per_s"),
    ("median-text", "result.step_time_s", {"median": "x"}, "result.step_time_s"),
    ("steps-list", "result.step_time_s", [0.1], "result.step_time_s"),
    ("telemetry-list", "telemetry", [1], "telemetry must be a JSON object"),
    ("error-number", "error", 5, "error must be text"),
    ("spec-param-infinity", "spec.params", {"lr": float("inf")}, "spec.params.lr is not a finite number"),
    ("spec-lr-nan", "spec.learning_rate", float("nan"), "spec.learning_rate is not a finite number"),
]


def deep_file(folder: Path) -> None:
    (folder / "r.json").write_text("[" * 100_000 + "]" * 100_000)


CASES: list[Case] = [
    *(Case(f"import-{name}", IMPORT, fragment, files=record_file(changed(path, value)))
      for name, path, value, fragment in FIELD_CASES),
    Case("import-json-list", IMPORT, "is not a dlbench run record", files={"r.json": b"[1, 2, 3]"}),
    Case("import-record-list", IMPORT, "is not a dlbench run record", files={"r.json": b'{"record": [1]}'}),
    Case("import-empty-file", IMPORT, "is not a dlbench run file", files={"r.json": b""}),
    Case("import-binary", IMPORT, "is not a dlbench run file", files={"r.json": b"\xff\xfe\x00junk"}),
    Case("import-deeply-nested", IMPORT, "is not a dlbench run file", files={"r.json": deep_file}),
    Case("import-series-not-list", IMPORT, "series must be a list", files=record_file(GOOD, series={"t_s": 1})),
    Case("import-series-sample-number", IMPORT, "series[1] must be a JSON object",
         files=record_file(GOOD, series=[{"t_s": 0.0}, 5])),
    Case("import-good-then-bad", ["store", "import", "{tmp}/good.json", "{tmp}/r.json"], "status 'hacked'",
         files={"good.json": json.dumps(GOOD).encode(), **record_file(changed("status", "hacked"))}),
    Case("import-directory", ["store", "import", "{tmp}"], "is a directory, not a regular file"),
    Case("import-fifo", IMPORT, "is a FIFO, not a regular file", files={"r.json": lambda folder: os.mkfifo(folder / "r.json")}),
    Case("import-link-to-dev-zero", IMPORT, "is a device, not a regular file",
         files={"r.json": lambda folder: (folder / "r.json").symlink_to("/dev/zero")}),
    Case("import-link-to-dev-urandom", IMPORT, "is a device", files={"r.json": lambda f: (f / "r.json").symlink_to("/dev/urandom")}),
    Case("import-dangling-link", IMPORT, "cannot read run file", files={"r.json": lambda f: (f / "r.json").symlink_to(f / "nowhere")}),
]


def stored_with_id(run_id: str):
    """Files for a case: the case's store (already copied) gets a run with ``run_id``, as an older dlbench that
    imported without checks could have stored it; a TensorBoard event file waits in ``tb/`` to be kept."""

    def plant(folder: Path) -> None:
        store = open_store(str(folder / "runs.db"))
        try:
            seeded = store.records()[0]
            # the insert without save's check: an older dlbench imported without one
            store._insert(copy.deepcopy(seeded) | {"id": run_id}, store.series(seeded["id"]))
        finally:
            store.close()
        (folder / "tb").mkdir()
        (folder / "tb" / "events.out.tfevents.keep").write_bytes(b"kept")

    return {"store": plant}


CASES += [
    Case("tensorboard-export-id-traversal", ["tensorboard", "export", "../", "--out", "{tmp}/tb/inner"],
         "cannot be used as a file name", files=stored_with_id("../../tb")),
    Case("tensorboard-export-id-dotdot", ["tensorboard", "export", "..", "--out", "{tmp}/tb/inner"],
         "cannot be used as a file name", files=stored_with_id("..")),
    Case("plot-telemetry-id-traversal", ["plot", "telemetry", "../"], "cannot be used as a file name",
         files=stored_with_id("../tb/x")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_store_input_is_refused_before_anything_is_written(case, seeded_store, tmp_path, monkeypatch, capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "runs.db.spool").exists()
    if (tmp_path / "tb").exists():  # nothing written beside --out, and no event file deleted
        assert sorted(p.name for p in (tmp_path / "tb").rglob("*")) == ["events.out.tfevents.keep"]


POSTGRES_CASES = [c for c in CASES if c.id in (
    "import-tags-long-value", "import-spec-param-infinity", "import-id-path-traversal", "import-fifo",
    "import-link-to-dev-zero", "import-good-then-bad", "import-series-sample-number")]


@pytest.mark.postgres
@pytest.mark.parametrize("case", params(POSTGRES_CASES))
def test_hostile_import_into_postgresql_is_refused_and_writes_nothing(case, tmp_path, capsys):
    """Round three: every store backend. The same refusals on a PostgreSQL store, whose runs stay as they were."""
    url = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("set DLBENCH_TEST_POSTGRES_URL to run the store tests on PostgreSQL")
    from dlbench.cli.app import main

    for name, content in case.files.items():
        content(tmp_path) if callable(content) else (tmp_path / name).write_bytes(content)
    store = open_store(url)
    try:
        before = sorted(r["id"] for r in store.records())
    finally:
        store.close()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in case.argv]
    assert main([*argv, "--db", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dlbench: error: ") and case.fragment in err
    store = open_store(url)
    try:
        assert sorted(r["id"] for r in store.records()) == before
    finally:
        store.close()


# --- Round four: saved, or says it was not ---

RUN = ["run", "lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "2",
       "--warmup", "1", "--no-telemetry"]
CLUSTER_CASES = [
    Case("env-cluster-too-long", RUN, "$DLBENCH_CLUSTER 'aaaa", env={"DLBENCH_CLUSTER": "a" * 300}),
    Case("env-cluster-space-semicolon", RUN, "$DLBENCH_CLUSTER 'a b;c' is refused", env={"DLBENCH_CLUSTER": "a b;c"}),
    Case("env-slurm-cluster-newline", RUN, "$SLURM_CLUSTER_NAME 'alps\\nx' is refused",
         env={"SLURM_CLUSTER_NAME": "alps\nx"}),
    Case("env-slurm-cluster-markup", ["comm", "--iters", "1", "--nproc", "2"], "$SLURM_CLUSTER_NAME '[red]x' is refused",
         env={"SLURM_CLUSTER_NAME": "[red]x"}),
]


@pytest.mark.parametrize("case", params(CLUSTER_CASES))
def test_a_cluster_name_from_the_environment_passes_the_cluster_rule_before_any_run(case, seeded_store, tmp_path,
                                                                                     monkeypatch, capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "runs.db.spool").exists()


def test_a_valid_cluster_option_overrides_a_bad_environment_name(tmp_path, monkeypatch, capsys):
    from dlbench.cli.app import main

    monkeypatch.setenv("SLURM_CLUSTER_NAME", "alps\nx")
    monkeypatch.setenv("DLBENCH_METRICS_DIR", str(tmp_path / "metrics"))
    assert main([*RUN, "--cluster", "alps", "--db", str(tmp_path / "runs.db"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["env"]["cluster"] == "alps"


def test_a_run_the_store_refuses_exits_3_naming_where_its_record_is_and_is_not_retried(tmp_path, monkeypatch, capsys):
    import sqlite3

    from dlbench.cli.app import main
    from dlbench.errors import NOT_SAVED_EXIT_CODE
    from dlbench.store import spool as spoolmod

    db = tmp_path / "runs.db"
    open_store(str(db)).close()
    with sqlite3.connect(db) as conn:  # the database refuses every run, as a constraint would
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'refused by policy'); END")
    monkeypatch.setenv("DLBENCH_METRICS_DIR", str(tmp_path / "metrics"))
    assert main([*RUN, "--db", str(db)]) == NOT_SAVED_EXIT_CODE
    err = capsys.readouterr().err
    (kept,) = (tmp_path / "runs.db.spool" / spoolmod.QUARANTINE).glob("*.json")
    assert "NOT saved" in err and "refused by policy" in err and str(kept) in err and "Traceback" not in err
    assert "refused by policy" in (kept.parent / f"{kept.name}.why.txt").read_text()
    store = open_store(str(db))  # the next open does not try it again, nor print it again
    store.close()
    assert "refused" not in capsys.readouterr().err and kept.exists()


@pytest.mark.postgres
def test_a_spooled_run_postgresql_refuses_for_good_is_moved_aside_once(tmp_path, monkeypatch, caplog):
    """A run spooled by an older dlbench with a 300-character cluster: PostgreSQL's varchar(128) refuses it
    ("value too long"); it used to stay in the spool and fail every open. Now it is moved aside once."""
    url = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("set DLBENCH_TEST_POSTGRES_URL to run the store tests on PostgreSQL")
    from dlbench.errors import RecordRefused
    from dlbench.store import spool as spoolmod

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    long_cluster = changed("env.cluster", "a" * 300) | {"id": "toolong00001"}
    path = spoolmod.write(spoolmod.spool_dir(url), long_cluster, [])
    with caplog.at_level("WARNING"):
        open_store(url).close()
    kept = path.parent / spoolmod.QUARANTINE / path.name
    assert not path.exists() and kept.exists() and "too long" in (kept.parent / f"{path.name}.why.txt").read_text()
    caplog.clear()
    with caplog.at_level("WARNING"):
        store = open_store(url)
    try:
        assert "toolong00001" not in caplog.text  # not retried, not printed again
        assert "toolong00001" not in [r["id"] for r in store.records()]
        with pytest.raises(RecordRefused) as refused:  # a live save of such a run: refused, kept, raised
            store.save(long_cluster | {"id": "toolong00002"})
    finally:
        store.close()
    assert refused.value.path.exists() and "value too long" in str(refused.value)
