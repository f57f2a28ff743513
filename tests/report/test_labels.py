"""Chart labels show only what differs between the bars; what they share is the title (issue 34, item 5)."""

import re

from hypothesis import given, strategies as st

from dlbench.report.labels import ONLY_SHARED, settings, split_shared

LLM = [f"llm train fp32 bs8 threads=1{layout} [dim=64,n_heads=4,n_kv_heads=2,n_layers=2,preset=tiny,seq_len=32,tied=false]"
       for layout in ("", " x2 parallel=ddp:dp2tp1pp1", " x2 parallel=fsdp:dp2tp1pp1", " x2 parallel=tp:dp1tp2pp1",
                      " x2 parallel=pp:dp1tp1pp2", " x2 parallel=fsdp+tp:dp1tp2pp1")]


def test_the_llm_bars_are_told_apart_by_their_layout_alone():
    shared, labels = split_shared(LLM)
    assert shared == LLM[0]  # the single-process run has only shared settings
    assert labels == [ONLY_SHARED, "x2 parallel=ddp:dp2tp1pp1", "x2 parallel=fsdp:dp2tp1pp1", "x2 parallel=tp:dp1tp2pp1",
                      "x2 parallel=pp:dp1tp1pp2", "x2 parallel=fsdp+tp:dp1tp2pp1"]


def test_the_reports_bar_chart_labels_fit_and_the_title_holds_the_rest():
    from dlbench.report.compare import GroupEstimate
    from dlbench.report.html import _workloads_section

    rows = [{"configuration": c, "workload": "llm", "runs": 1, "failed": 0, "min": 10.0 + i, "max": 10.0 + i,
             "estimate": GroupEstimate(1, 10.0 + i, 0.1)} for i, c in enumerate(LLM)]
    page = _workloads_section(rows)
    bar_labels = re.findall(r'<tspan x="196"[^>]*>([^<]*)</tspan>', page)
    assert bar_labels == split_shared(LLM)[1] and not any("…" in label for label in bar_labels)
    assert "n_kv_heads=2" in re.search(r'<svg class="chart" data-kind="bar".*?<title>([^<]*)</title>', page).group(1)


ORDER = ["train", "fp32", "bf16", "bs8", "bs16", "x2", "compile", "threads=1"]
# as config_key writes them: settings in a fixed order, parameters by name, one value each
WORDS = st.lists(st.sampled_from(ORDER), unique=True, max_size=4).map(lambda ws: sorted(ws, key=ORDER.index))
PARAMS = st.dictionaries(st.sampled_from("abcd"), st.sampled_from("123"), max_size=3).map(
    lambda d: [f"{k}={v}" for k, v in sorted(d.items())])
CONFIGS = st.lists(st.builds(lambda words, params: " ".join(["w", *words]) + (f" [{','.join(params)}]" if params else ""),
                             WORDS, PARAMS), min_size=2, max_size=6, unique=True)


@given(CONFIGS)
def test_shared_and_label_together_give_back_each_configurations_settings(configurations):
    shared, labels = split_shared(configurations)
    shared_words, shared_params = settings(shared)
    for configuration, label in zip(configurations, labels):
        words, params = settings(configuration)
        own_words, own_params = settings("" if label == ONLY_SHARED else label)
        assert set(words) == set(shared_words) | set(own_words) and set(params) == set(shared_params) | set(own_params)
    # configurations with different settings never get the same label
    distinct = {frozenset(settings(c)[0]) | frozenset(settings(c)[1]) for c in configurations}
    assert len(set(labels)) == len(distinct)
