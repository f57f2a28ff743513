"""A tiny external-command objective that follows PBT's checkpoint contract (dlbench.hpo.ray_pbt).

Flags: --lr FLOAT --epochs N --sleep S --save-checkpoint DIR [--load-checkpoint SRC] [--mode nockpt].
The fake model's state is {"epoch": n, "w": w}; each epoch adds --lr to w (a bigger lr learns faster),
loss = 10 - w. After epoch n it writes DIR/<n>/state.json, then prints 'FoM[n]: <loss>'; 'FoM: <loss>'
at the end. With --load-checkpoint it starts from SRC/state.json. --mode nockpt breaks the contract.
"""

import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--save-checkpoint", required=True)
parser.add_argument("--load-checkpoint")
parser.add_argument("--mode", default="ok")
args = parser.parse_args()

state = {"epoch": 0, "w": 0.0}
if args.load_checkpoint:
    with open(os.path.join(args.load_checkpoint, "state.json")) as f:
        state = json.load(f)
for epoch in range(state["epoch"] + 1, args.epochs + 1):
    time.sleep(args.sleep)
    state = {"epoch": epoch, "w": state["w"] + args.lr}
    if args.mode != "nockpt":
        os.makedirs(os.path.join(args.save_checkpoint, str(epoch)))
        with open(os.path.join(args.save_checkpoint, str(epoch), "state.json"), "w") as f:
            json.dump(state, f)
    print(f"FoM[{epoch}]: {10 - state['w']:.6f}", flush=True)
print(f"FoM: {10 - state['w']:.6f}", flush=True)
