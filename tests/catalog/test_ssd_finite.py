"""The quick suite's ssd run (issue 44, item 2): from random weights SSD300's first gradient has a norm of ~6e3,
and SGD at the default lr 0.01 threw the loss to ~1e13 at step 2 and NaN from step 3 on every seed. The
workload clips the gradients' norm (``SSD300.max_grad_norm``); its loss stays finite at the suite's settings."""

import json
import math
from importlib import resources

import pytest
import yaml

from dlbench.catalog.detection import SSD300
from dlbench.cli.app import main


def test_ssd_clips_its_gradients():
    assert SSD300.max_grad_norm == 10.0


#: One seed: without the clipping every seed went NaN by step 3, so one fails as surely as two (seed 1 was a second
#: run of the same claim: 20 s of CPU; checked by removing the clipping: this seed fails).
SEED = 0


@pytest.mark.slow  # builds SSD300 and trains it for a few steps on the CPU (~20 s of CPU, one thread)
def test_the_quick_suites_ssd_run_keeps_a_finite_loss(capsys):
    # in this process (dlbench.cli.app.main): what is proved is the run's loss, not what a fresh interpreter does
    suite = yaml.safe_load(resources.files("dlbench").joinpath("data/suite-quick.yaml").read_text())
    [row] = [r for r in suite["runs"] if r["workload"] == "ssd"]
    params = [arg for k, v in row["params"].items() for arg in ("-p", f"{k}={v}")]
    code = main(["run", "ssd", *params, "-b", str(row["batch_size"]), "--steps", str(row["steps"]),
                 "--warmup", str(row["warmup"]), "--seed", str(SEED), "--threads", "1", "--no-telemetry",
                 "--no-store", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)["result"]
    assert math.isfinite(result["final_loss"]) and not result.get("diverged") and not result.get("not_finite")
