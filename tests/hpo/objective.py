"""A tiny external-command objective for the HPO tests (the Cray HPO contract).

Flags: --x FLOAT --y INT (optional) --epochs N --sleep S (--hold PATH: sleep only while PATH exists, so a
test holds its trials mid-run, then lets the rest run at once); loss = (x - 0.3)^2 + 0.01 * (y - 2)^2 + 1/epoch,
printed as 'FoM[e]: <loss>' after each epoch and 'FoM: <loss>' at the end. Test switches:
--mode garbage|nofom|exit3|slow|die-once (die-once: the first run kills its worker with SIGKILL).
"""

import argparse
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, default=0.0)
parser.add_argument("--y", type=int, default=2)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--mode", default="ok")
parser.add_argument("--marker", default="")
parser.add_argument("--hold", default="")
args = parser.parse_args()

if args.mode == "die-once" and args.marker and not os.path.exists(args.marker):
    open(args.marker, "w").close()
    os.kill(os.getppid(), signal.SIGKILL)  # the worker that runs this trial dies
    time.sleep(30)
if args.mode == "exit3":
    print("something went wrong", file=sys.stderr)
    sys.exit(3)
if args.mode == "garbage":
    print("FoM: not-a-number", flush=True)
    sys.exit(0)
loss = None
for epoch in range(1, args.epochs + 1):
    if not args.hold or os.path.exists(args.hold):
        time.sleep(args.sleep)
    loss = (args.x - 0.3) ** 2 + 0.01 * (args.y - 2) ** 2 + 1.0 / epoch
    print(f"epoch {epoch} done", flush=True)
    print(f"FoM[{epoch}]: {loss:.6f}", flush=True)
if args.mode == "slow":
    time.sleep(60)
if args.mode != "nofom":
    print(f"FoM: {loss:.6f}", flush=True)
