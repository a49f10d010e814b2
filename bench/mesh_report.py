"""What a CPU mesh costs: one training step of the same world on one process and on a mesh
of processes on this machine (Gloo over loopback), side by side in one run.

    python3 bench/mesh_report.py            # prints a table
    UFORM_BENCH_QUICK=1 python3 bench/mesh_report.py

The workload is bench/train_report.py's (depth 4, hidden 256, JOINT, 64 texts of 256 bytes,
bags in pairs). Contenders share the machine's cores: one process with every core, and
`hosts` processes with cores / hosts threads each, each holding 1 / hosts of the items. On one
machine a mesh can only lose (the same cores, plus the gathers and the gradient sum over
loopback); the table says how much, which bounds the overhead a multi-host run pays per step.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

QUICK = bool(os.environ.get("UFORM_BENCH_QUICK"))
SHAPE = dict(depth=2, hidden=64) if QUICK else dict(depth=4, hidden=256)
TEXTS, BYTES, STEPS = (16, 64, 3) if QUICK else (64, 256, 4)

HOST = r'''
import json, os, sys, time
import numpy as np
import uform
spec = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
texts = [bytes(rng.integers(32, 127, size=spec["bytes"], dtype=np.uint8)) for _ in range(spec["texts"])]
bags = np.arange(spec["texts"], dtype=np.uint32) // 2
first = spec["host"] * spec["texts"] // spec["hosts"]
last = (spec["host"] + 1) * spec["texts"] // spec["hosts"]
executor = uform.Executor.for_ram(spec["threads"])
mesh = None
if spec["hosts"] > 1:
    mesh = uform.Mesh.bootstrap(executor, uform.MeshOptions(
        host_domain_index=spec["host"], host_domain_count=spec["hosts"], directory=spec["directory"],
        job="bench", timeout_ms=120000))
trainer = uform.Trainer.init_ram(executor, mesh=mesh, objective=uform.Objective.JOINT, seed=1,
                                 batch=uform.BatchShape(max_rows_per_device=spec["texts"],
                                                        max_columns_per_row=spec["bytes"]),
                                 **spec["shape"])
seconds = []
stats = uform.TrainerStepStats()
for step in range(spec["steps"]):
    started = time.perf_counter()
    trainer.step([uform.Modality.TEXT] * (last - first), texts[first:last], bags=bags[first:last], stats=stats)
    seconds.append(time.perf_counter() - started)
print(json.dumps({"seconds": seconds, "loss": stats.loss}))
'''


def run(hosts: int, threads: int, directory: str) -> dict:
    environment = dict(os.environ, UFORM_MESH_HOSTNAME="127.0.0.1", PYTHONPATH=ROOT)
    processes = []
    for host in range(hosts):
        spec = dict(host=host, hosts=hosts, threads=threads, directory=directory, texts=TEXTS,
                    bytes=BYTES, steps=STEPS, shape=SHAPE)
        processes.append(subprocess.Popen([sys.executable, "-c", HOST, json.dumps(spec)],
                                          env=environment, stdout=subprocess.PIPE, text=True))
    outputs = [json.loads(p.communicate(timeout=1800)[0]) for p in processes]
    # a step ends when its slowest host ends; the first step is a warm-up
    per_step = [max(o["seconds"][s] for o in outputs) for s in range(1, STEPS)]
    return {"best": min(per_step), "median": sorted(per_step)[len(per_step) // 2],
            "loss": outputs[0]["loss"]}


def main() -> None:
    cores = len(os.sched_getaffinity(0))
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        alone = run(1, cores, directory)
        rows.append(("1 process", cores, alone))
        for hosts in (2, 4):
            if hosts > cores * 2:
                continue
            time.sleep(1)
            rows.append((f"mesh of {hosts}", max(1, cores // hosts), run(hosts, max(1, cores // hosts), directory)))
    print(f"# one training step, depth {SHAPE['depth']} hidden {SHAPE['hidden']}, JOINT, {TEXTS} texts of "
          f"{BYTES} bytes, {cores} cores, Gloo over loopback\n")
    print("| contender | threads each | best s/step | median s/step | last loss | time against 1 process |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, threads, result in rows:
        print(f"| {name} | {threads} | {result['best']:.3f} | {result['median']:.3f} | {result['loss']:.6f} | "
              f"{result['best'] / alone['best']:.2f}x |")


if __name__ == "__main__":
    main()
