"""The suite's own machinery (tests/conftest.py): the tier hook marks a test using a heavy fixture ``slow``, and
under ``-n 2 --dist loadgroup`` the tests sharing a heavy fixture run on one worker, which builds the fixture
once, and the tests of the fixtures that mostly wait go out first, together. Checked on a tiny suite of its
own, run by pytest in a subprocess with this conftest."""

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: Heavy fixtures by names the hook knows: "real_db", and two that mostly wait; each build appends its
#: name and worker to a file.
FIXTURE = '''

def _built(name):
    with open("builds.txt", "a") as f:
        f.write(name + " " + os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
    return 42


@pytest.fixture(scope="session")
def real_db():
    return _built("real_db")


@pytest.fixture(scope="session")
def cluster2():
    return _built("cluster2")


@pytest.fixture(scope="session")
def cluster4():
    return _built("cluster4")
'''
USES = "def test_{i}(real_db):\n    assert real_db == 42\n\n"
PLAIN = "def test_plain_{i}():\n    assert 1 + {i} > {i}\n\n"
WAITS = "def test_waits_{i}({fixture}):\n    assert {fixture} == 42\n\n"


def small_suite(root: Path) -> Path:
    (root / "conftest.py").write_text((TESTS / "conftest.py").read_text() + FIXTURE)
    (root / "timeline.py").write_text((TESTS / "timeline.py").read_text())  # the conftest's machine CPU reading
    (root / "test_a.py").write_text("".join(USES.format(i=i) + PLAIN.format(i=i) for i in range(6)))
    (root / "test_b.py").write_text("".join(USES.format(i=i) + PLAIN.format(i=i) for i in range(6, 12)))
    (root / "test_c.py").write_text("".join(WAITS.format(i=i, fixture=("cluster2", "cluster4")[i % 2])
                                            for i in range(4)))
    return root


def pytest_in(root: Path, *args: str) -> str:
    # only the plugin the hook works with (xdist): Hypothesis's and anyio's, loaded by default, cost each of the
    # run's interpreters (three under -n 2) about a second of CPU and take no part here
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "xdist", "-p", "no:cacheprovider", "-v", *args],
                         cwd=root, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return out.stdout


def test_a_heavy_fixtures_tests_are_slow(tmp_path):
    out = pytest_in(small_suite(tmp_path), "-m", "not slow")
    assert "12 passed, 16 deselected" in out
    assert not (tmp_path / "builds.txt").exists()


def test_a_heavy_fixtures_tests_share_one_worker_which_builds_it_once(tmp_path):
    out = pytest_in(small_suite(tmp_path), "-n", "2", "--dist", "loadgroup")
    assert "28 passed" in out
    ran = re.findall(r"\[(gw\d)\] .*PASSED (test_\w\.py::test_\w+)(?:@(\w+))?", out)
    assert len(ran) == 28, out[-3000:]
    groups = {test: (worker, group) for worker, test, group in ran}
    real_db = {groups[f"test_{'ab'[i // 6]}.py::test_{i}"] for i in range(12)}
    assert len(real_db) == 1 and next(iter(real_db))[1] == "real_db", real_db
    # the fixtures that mostly wait: one group on one worker, before anything else that worker ran
    waits = {groups[f"test_c.py::test_waits_{i}"] for i in range(4)}
    assert len(waits) == 1 and next(iter(waits))[1] == "waiting", waits
    (waiter, _), = waits
    assert [test for worker, test, _ in ran if worker == waiter][:4] == [f"test_c.py::test_waits_{i}" for i in range(4)]
    builds = sorted(line.split() for line in (tmp_path / "builds.txt").read_text().splitlines())
    assert builds == [["cluster2", waiter], ["cluster4", waiter], ["real_db", next(iter(real_db))[0]]]
