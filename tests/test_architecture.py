"""The architecture is checked, not hoped for: import-linter's contracts in pyproject.toml (layers that
point one way, no import cycles between subpackages)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
