"""The suite's own machinery (tests/conftest.py): the tier hook marks a test using a heavy fixture ``slow``, and
under ``-n 2 --dist loadgroup`` the tests sharing a heavy fixture run on one worker, which builds the fixture
once. Checked on a tiny suite of its own, run by pytest in a subprocess with this conftest."""

import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: A heavy fixture by the name the hook knows ("real_db"); each build appends its worker to a file.
FIXTURE = '''

@pytest.fixture(scope="session")
def real_db():
    with open("builds.txt", "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
    return 42
'''
USES = "def test_{i}(real_db):\n    assert real_db == 42\n\n"
PLAIN = "def test_plain_{i}():\n    assert 1 + {i} > {i}\n\n"


def small_suite(root: Path) -> Path:
    (root / "conftest.py").write_text((TESTS / "conftest.py").read_text() + FIXTURE)
    (root / "test_a.py").write_text("".join(USES.format(i=i) + PLAIN.format(i=i) for i in range(6)))
    (root / "test_b.py").write_text("".join(USES.format(i=i) + PLAIN.format(i=i) for i in range(6, 12)))
    return root


def pytest_in(root: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *args], cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return out.stdout


def test_a_heavy_fixtures_tests_are_slow(tmp_path):
    out = pytest_in(small_suite(tmp_path), "-m", "not slow")
    assert "12 passed, 12 deselected" in out
    assert not (tmp_path / "builds.txt").exists()


def test_a_heavy_fixtures_tests_share_one_worker_which_builds_it_once(tmp_path):
    out = pytest_in(small_suite(tmp_path), "-n", "2", "--dist", "loadgroup")
    assert "24 passed" in out
    workers = set(re.findall(r"\[(gw\d)\] .*PASSED test_[ab]\.py::test_\d+@real_db", out))
    assert len(re.findall(r"PASSED test_[ab]\.py::test_\d+@real_db", out)) == 12, out[-3000:]
    assert len(workers) == 1, out[-3000:]
    assert (tmp_path / "builds.txt").read_text().split() == list(workers)
