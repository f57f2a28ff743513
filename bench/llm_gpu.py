"""The llm workload on GPUs: the 1B preset on one GPU (goal: MFU ≥ 40 %), the 8B preset on 8 GPUs
(anchor: torchtitan's published Llama 3.1 8B table). Not run on the development machine (no GPU).

    python bench/llm_gpu.py 1b      # one GPU, bf16, torch.compile
    python bench/llm_gpu.py 8b      # 8 GPUs on this node, FSDP2 + selective AC, bf16, torch.compile

Each prints the record's tokens/s per device and MFU by the 6·N + attention formula beside the goal.
torchtitan's table (8 × H100, sequence 8192, local batch 1, FSDP, selective AC, bf16): 5,762 tokens/s
per GPU, 6,667 with torch.compile, 8,532 with Float8; 33–39 % MFU without Float8.
"""

from __future__ import annotations

import json
import subprocess
import sys

COMMANDS = {
    "1b": (["-p", "preset=1b", "--precision", "bf16", "--compile", "-b", "4", "--steps", "30", "--warmup", "5"],
           "formula MFU >= 40 %"),
    "8b": (["-p", "preset=8b", "--nproc", "8", "--parallel", "fsdp", "--precision", "bf16", "--compile",
            "--ac", "selective", "-b", "1", "--steps", "30", "--warmup", "5"],
           "torchtitan: 6,667 tokens/s per GPU with torch.compile (FSDP, 8 x H100)"),
}


def main() -> None:
    preset = sys.argv[1] if len(sys.argv) > 1 else "1b"
    argv, goal = COMMANDS[preset]
    cmd = [sys.executable, "-m", "dlbench", "run", "llm", *argv, "--device", "cuda", "--json"]
    print("$ " + " ".join(cmd[1:]), file=sys.stderr)
    record = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=False).stdout)
    result = record.get("result") or {}
    print(json.dumps({"status": record["status"], "error": record["error"],
                      "tokens_per_s_per_device": result.get("tokens_per_s_per_device"),
                      "formula_mfu": result.get("formula_mfu"), "counter_mfu": result.get("mfu"),
                      "peak_memory_bytes": result.get("peak_memory_bytes"), "goal": goal}, indent=2))


if __name__ == "__main__":
    main()
