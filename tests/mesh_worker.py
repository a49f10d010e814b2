"""One host of a mesh test (tests/test_mesh.py): bootstraps, trains its share of a case's
steps (tests/mesh_cases.py) and writes what it saw as JSON; exceptions are written too,
never raised, so the test reads every host's outcome.

    python tests/mesh_worker.py SPEC.json     (the spec names the output file)
"""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import uform  # noqa: E402
from mesh_cases import COMPARED_TENSORS, run_steps, trainer_keywords  # noqa: E402


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as stream:
        spec = json.load(stream)
    out: dict = {"host": spec["host"], "error": None}
    started = time.monotonic()
    try:
        executor = uform.Executor.for_ram(threads=1)
        mesh = uform.Mesh.bootstrap(executor, uform.MeshOptions(
            host_domain_index=spec["host"], host_domain_count=spec["hosts"],
            directory=spec["directory"], job=spec["job"], timeout_ms=spec.get("timeout_ms", 20000)))
        description = mesh.describe()
        out["run_id"], out["rank"], out["ranks"] = description.run_id, description.rank, description.ranks
        keywords = trainer_keywords(spec["case"])
        keywords.update({k: v for k, v in spec.get("override", {}).items()})
        if "override_batch_columns" in spec:
            shape = keywords["batch"]
            keywords["batch"] = uform.BatchShape(
                max_rows_per_device=shape.max_rows_per_device,
                max_segments_per_device=shape.max_segments_per_device,
                max_columns_per_row=spec["override_batch_columns"], image=shape.image, audio=shape.audio)
        if spec.get("resume"):
            keywords["resume"] = spec["resume"]
        trainer = uform.Trainer.init_ram(executor, mesh=mesh, **keywords)
        first, last = spec.get("steps", [1, 4])
        out.update(run_steps(trainer, spec["case"], range(first, last), spec["host"], spec["hosts"],
                             die_at=spec.get("die_at", -1), hang_at=spec.get("hang_at", -1),
                             bad_edge=spec.get("bad_edge", False), no_bags=spec.get("no_bags", False),
                             deferred=spec.get("deferred", False)))
        if spec.get("save"):
            trainer.save(spec["save"])
        out["tensors"] = {name: trainer.tensor(name).tolist() for name in COMPARED_TENSORS}
    except uform.Error as error:
        out["error"] = [type(error).__name__, str(error)]
    out["seconds"] = time.monotonic() - started
    with open(spec["out"], "w", encoding="utf-8") as stream:
        json.dump(out, stream)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
