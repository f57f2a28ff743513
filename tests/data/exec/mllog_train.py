"""A tiny MLPerf implementation of our own (tests/mlperf/test_mlperf_exec.py): it "trains" resnet (MLPerf's
training/resnet, open division) for a few fake epochs and logs every key an MLPerf result needs through
mlperf-logging's ``mllog`` (never by hand), reaching the 0.759 top-1 target after ``--epochs`` epochs.

``mllog_train.py --seed N --log PATH [--epochs E] [--epoch-s S] [--mode MODE]``

Only rank 0 (torchrun's RANK) logs. The log goes to ``--log`` (else to the file named by the environment variable MLLOG_TRAIN_LOG). The seed shifts
the accuracy curve a little and is logged as ``seed``. MODE says how it ends:

ok        reaches the target, run_stop status success, exits 0 (the default)
abort     never reaches the target: run_stop status aborted after its epochs, exits 0
crash     exits 3 with a traceback on stderr after epoch 1, without run_stop
no-stop   exits 0 after its epochs without logging run_stop
no-log    writes no log at all, exits 0
"""

import argparse
import logging
import os
import sys
import time

from mlperf_logging import mllog
from mlperf_logging.mllog import constants as c

TARGET = 0.759  # MLPerf's ResNet-50 top-1 target, the same in every round from v0.7 on

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--log", default=os.environ.get("MLLOG_TRAIN_LOG"))
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--epoch-s", type=float, default=0.05)
parser.add_argument("--mode", default="ok", choices=["ok", "abort", "crash", "no-stop", "no-log"])
args = parser.parse_args()
if not args.log:
    sys.exit("mllog_train.py: give --log PATH or set MLLOG_TRAIN_LOG")
if args.mode == "no-log" or os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 logs
    print("trained without logging", flush=True)
    sys.exit(0)

# A logger of our own with a file handler: mllog's lines go to --log and nowhere else.
logger = logging.getLogger("mllog_train")
logger.propagate = False
logger.setLevel(logging.INFO)
handler = logging.FileHandler(args.log, mode="w", encoding="utf-8")
handler.setFormatter(logging.Formatter("%(message)s"))
logger.addHandler(handler)
mllog.config(logger=logger)
log = mllog.get_mllogger()

log.event(key=c.SUBMISSION_BENCHMARK, value=c.RESNET)
log.event(key=c.SUBMISSION_ORG, value="dlbench-tests")
log.event(key=c.SUBMISSION_DIVISION, value=c.OPEN)
log.event(key=c.SUBMISSION_STATUS, value=c.RESEARCH)
log.event(key=c.SUBMISSION_PLATFORM, value="tiny")
log.event(key="number_of_nodes", value=1)
log.event(key="accelerators_per_node", value=0)
log.event(key=c.CACHE_CLEAR, value=True)
log.start(key=c.INIT_START)
log.event(key=c.SEED, value=args.seed)
log.event(key=c.GLOBAL_BATCH_SIZE, value=32)
log.event(key=c.GRADIENT_ACCUMULATION_STEPS, value=1)
log.event(key=c.TRAIN_SAMPLES, value=1024)
log.event(key=c.EVAL_SAMPLES, value=256)
log.end(key=c.INIT_STOP)
log.start(key=c.RUN_START)
accuracy = 0.0
for epoch in range(1, args.epochs + 1):
    log.start(key=c.BLOCK_START, metadata={c.FIRST_EPOCH_NUM: epoch, c.EPOCH_COUNT: 1})
    log.start(key=c.EPOCH_START, metadata={c.EPOCH_NUM: epoch})
    time.sleep(args.epoch_s * (1 + (args.seed % 5) / 10))  # the epoch's "training": runs differ by their seed
    log.end(key=c.EPOCH_STOP, metadata={c.EPOCH_NUM: epoch})
    log.start(key=c.EVAL_START, metadata={c.EPOCH_NUM: epoch})
    # climbs to just over the target at the last epoch (just under it when aborting)
    accuracy = (TARGET + (0.001 if args.mode != "abort" else -0.1)) * epoch / args.epochs
    log.event(key=c.EVAL_ACCURACY, value=round(accuracy, 4), metadata={c.EPOCH_NUM: epoch})
    log.end(key=c.EVAL_STOP, metadata={c.EPOCH_NUM: epoch})
    log.end(key=c.BLOCK_STOP, metadata={c.FIRST_EPOCH_NUM: epoch})
    print(f"epoch {epoch}: top-1 {accuracy:.4f}", flush=True)
    if args.mode == "crash":
        print("Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access",
              file=sys.stderr, flush=True)
        sys.exit(3)
if args.mode != "no-stop":
    status = c.SUCCESS if accuracy >= TARGET else c.ABORTED
    log.end(key=c.RUN_STOP, metadata={c.STATUS: status, c.EPOCH_NUM: args.epochs})
