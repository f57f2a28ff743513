import pytest

from dlbench.report.compare import GroupEstimate, compare, config_key, critical_value, estimate, verdict, welch_df


def record(samples_per_s, workload="resnet50", sem=0.01, mean=1.0, status="ok", batch_size=16, **spec):
    return {
        "status": status,
        "spec": {"workload": workload, "mode": "train", "precision": "fp32", "batch_size": batch_size,
                 "params": {"image_size": 64}, "nproc": 1, **spec},
        "result": None if status != "ok" else {
            "samples_per_s": samples_per_s, "step_time_s": {"mean": mean, "sem": sem}},
    }


def test_estimate_uses_between_run_spread_with_several_runs():
    est = estimate([record(100.0), record(110.0), record(90.0)])
    assert est.runs == 3
    assert est.samples_per_s == pytest.approx(100.0)
    assert est.sem == pytest.approx(10.0 / 3 ** 0.5)


def test_estimate_propagates_step_time_spread_for_one_run():
    est = estimate([record(200.0, sem=0.02, mean=1.0)])
    assert est.sem == pytest.approx(4.0)  # 2% relative error of 200 samples/s


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (GroupEstimate(3, 100.0, 1.0), GroupEstimate(3, 110.0, 1.0), "faster"),
        (GroupEstimate(3, 100.0, 1.0), GroupEstimate(3, 90.0, 1.0), "slower"),
        # the same 10% difference is noise when the runs themselves spread by 10%: an interval of B/A
        # [0.71, 1.49] cannot tell (it was "within noise", which reads as "no change" and is not what it shows)
        (GroupEstimate(3, 100.0, 10.0), GroupEstimate(3, 110.0, 10.0), "cannot tell"),
        (GroupEstimate(3, 100.0, 1.0), GroupEstimate(3, 101.0, 1.0), "within noise"),
        (GroupEstimate(1, 100.0, 0.0), GroupEstimate(1, 100.0, 0.0), "within noise"),
    ],
)
def test_verdict_depends_on_spread_not_a_fixed_percentage(a, b, expected):
    assert verdict(a, b) == expected


def test_few_runs_need_a_larger_difference():
    # 6% apart with 2% standard errors: beyond 1.96 se, but not beyond t(2 df) = 4.30 se
    a, b = GroupEstimate(2, 100.0, 2.0, df=1), GroupEstimate(2, 94.0, 2.0, df=1)
    assert verdict(a, b, z=1.96) == "slower"
    assert welch_df(a, b) == pytest.approx(2.0)
    assert verdict(a, b) == "cannot tell"  # [0.82, 1.06]: not slower, and a 6% change is not ruled out either
    many = GroupEstimate(30, 100.0, 2.0, df=29), GroupEstimate(30, 94.0, 2.0, df=29)
    assert verdict(*many) == "slower"


@pytest.mark.parametrize("df, expected", [(1, 12.706), (2, 4.303), (4, 2.776), (2.5, (4.303 + 3.182) / 2), (30, 2.042), (None, 1.96)])
def test_critical_values(df, expected):
    assert critical_value(df) == pytest.approx(expected, abs=1e-3)
    assert critical_value(1000) == pytest.approx(1.96, abs=0.01)


def test_compare_groups_by_configuration_and_ignores_failed_runs():
    a = [record(100.0), record(102.0), record(50.0, workload="lstm"), record(0, status="failed")]
    b = [record(150.0), record(151.0), record(10.0, workload="vgg11")]
    rows = {row.key.split()[0]: row for row in compare(a, b)}
    assert rows["resnet50"].ratio == pytest.approx(150.5 / 101.0)
    assert rows["resnet50"].verdict == "faster"
    assert rows["lstm"].verdict == "only in A"
    assert rows["vgg11"].verdict == "only in B"
    assert rows["resnet50"].a.runs == 2


def test_config_key_separates_batch_sizes():
    assert config_key(record(1.0, batch_size=16)) != config_key(record(1.0, batch_size=32))


def test_config_key_tells_apart_settings_that_change_the_number():
    plain = config_key(record(1.0))
    assert config_key(record(1.0, channels_last=True)) != plain
    assert config_key(record(1.0, compile=True)) != plain
    assert config_key(record(1.0, optimizer="adam")) != plain
    assert config_key(record(1.0, data="loader")) != plain
    assert config_key(record(1.0, optimizer="sgd", channels_last=False)) == plain  # defaults add nothing


def test_repeat_hint_names_the_command_that_repeats_a_side():
    from dlbench.report.compare import repeat_hint

    (one,) = compare([record(100.0)], [record(90.0)])
    assert one.verdict == "cannot tell (1 run a side)"
    assert repeat_hint([one], "tag:try=a", "group=b").endswith(
        "repeat each side, e.g. dlbench run resnet50 … --tag try=a three times, then with --tag group=b.")
    assert "dlbench run resnet50 … three times (A's options), and B the same way." in repeat_hint([one], "3f2a1c", "9b0e77")
    (many,) = compare([record(100.0), record(100.1)], [record(90.0), record(90.1)])
    assert many.verdict == "slower" and repeat_hint([many], "tag:try=a", "tag:try=b") == ""


def test_runs_that_differ_only_in_their_data_path_pair_into_one_row():
    """--data files:DIR against synthetic batches is the input pipeline's cost (docs/io.md): compare pairs the two
    configurations into one row that names both paths, and leaves other settings apart."""
    files = [record(80.0, data="files:/scratch/d"), record(82.0, data="files:/scratch/d")]
    synthetic = [record(100.0), record(101.0)]
    rows = compare(files, synthetic)
    assert len(rows) == 1 and rows[0].ratio == pytest.approx(100.5 / 81.0)
    assert rows[0].key.endswith("(A data=files, B data=synthetic)") and rows[0].a.runs == rows[0].b.runs == 2
    other_batch = compare(files, [record(100.0, batch_size=32)])  # another setting differs too: not paired
    assert sorted(r.verdict for r in other_batch) == ["only in A", "only in B"]
    two_ways = compare(files + [record(90.0, data="loader")], synthetic)
    assert len(two_ways) == 3  # two of A's configurations (files, loader) could pair with B's: none does
