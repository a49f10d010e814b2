"""The CPU mesh (docs/distributed.md): 2 and 4 processes on this machine, each a host of one
mesh over a temporary directory, talking over loopback only (UFORM_MESH_HOSTNAME=127.0.0.1),
every run bounded by a timeout.

The oracle is one process holding every item of the world (tests/mesh_cases.py): the same
steps must give the same losses, gradients, embeddings and weights. Tolerances: a mesh sums
each gradient in another order than one process (per host, then across hosts), so FP32
rounding differs at about 1e-7 relative per addition; the gradients are compared at 1e-5 of
each tensor's largest value, the losses at 2e-5 relative. Embeddings of the first step come
from the same weights and rows, so they are equal bit for bit. Weights after three AdamW steps
are compared at 2 x the sum of the learning rates: AdamW moves every weight by about the rate
whatever its gradient's size, so a gradient at rounding level (~1e-9) may take either sign on
either side and move that weight the other way; anything beyond the bound is a real error.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import uform

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mesh_cases import COMPARED_TENSORS, STAT_NAMES, run_steps, trainer_keywords, world_step  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mesh_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEARNING_RATES = (1e-3, 2e-3, 2e-3)   # Schedule(learning_rate=2e-3, warmup_steps=2), steps 1-3


if uform.capabilities().mesh_engine is None:
    pytest.skip("this build has no mesh engine (Gloo, Debian's libgloo-dev, was not found when it "
                "was built): Mesh.bootstrap raises UnsupportedError", allow_module_level=True)


def start_hosts(tmp_path, case, hosts, job="run", started=None, common=None, per_host=None):
    """Starts one worker per host (all, or the hosts listed in `started`), each with the spec
    fields of `common` updated by its own in `per_host`; answers the processes and the paths
    of their outputs."""
    environment = dict(os.environ, UFORM_MESH_HOSTNAME="127.0.0.1", PYTHONPATH=ROOT)
    processes, outputs = [], []
    for host in (range(hosts) if started is None else started):
        spec = dict(directory=str(tmp_path / "exchange"), job=job, host=host, hosts=hosts, case=case,
                    out=str(tmp_path / f"{job}-{host}.json"))
        spec.update(common or {})
        spec.update((per_host or {}).get(host, {}))
        spec_path = tmp_path / f"{job}-{host}.spec.json"
        spec_path.write_text(json.dumps(spec))
        processes.append(subprocess.Popen([sys.executable, WORKER, str(spec_path)], env=environment,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outputs.append(spec["out"])
    return processes, outputs


def finish(processes, outputs, timeout=120):
    """Waits for every worker (killing any past the timeout) and reads their outputs."""
    results = []
    deadline = time.monotonic() + timeout
    for process, output in zip(processes, outputs):
        try:
            process.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail(f"a mesh worker hung past {timeout} s: {output}")
        printed = process.stdout.read().decode(errors="replace")
        if os.path.exists(output):
            with open(output, encoding="utf-8") as stream:
                results.append(json.load(stream))
            # the worker prints nothing, and neither may libuform or Gloo inside it
            assert printed == "", f"{output}: the host printed {printed[:2000]!r}"
        else:
            results.append({"killed": process.returncode, "printed": printed})
    return results


def one_process(case, steps=range(1, 4), resume=None):
    keywords = trainer_keywords(case)
    if resume:
        keywords["resume"] = resume
    trainer = uform.Trainer.init_ram(uform.Executor.for_ram(1), **keywords)
    record = run_steps(trainer, case, steps)
    record["tensors"] = {name: trainer.tensor(name) for name in COMPARED_TENSORS}
    return record


def assert_same_run(reference, results, steps=3, learning_rates=LEARNING_RATES):
    for result in results:
        assert result.get("error") is None, result
        # world means: every host reports the one-process losses
        np.testing.assert_allclose(np.array(result["stats"]), np.array(reference["stats"]), rtol=2e-5,
                                   atol=1e-7, err_msg=f"host {result['host']}: {STAT_NAMES}")
        if reference["gradients"] is not None and result["gradients"] is not None:
            for name, values in reference["gradients"].items():
                ours = np.array(result["gradients"][name])
                scale = max(np.abs(values).max(), 1e-30)
                assert np.abs(ours - np.array(values)).max() <= 1e-5 * scale, (result["host"], name)
        bound = 2 * sum(learning_rates[:steps])
        for name, values in reference["tensors"].items():
            difference = np.abs(np.array(result["tensors"][name]) - values).max()
            assert difference <= bound, (result["host"], name, difference)
    # the step answers this process's embeddings: together, the world's
    gathered = np.concatenate([np.array(r["embeddings"]) for r in results])
    np.testing.assert_array_equal(gathered, np.array(reference["embeddings"]))


@pytest.mark.parametrize("case,hosts", [("contrastive", 2), ("contrastive", 4), ("joint_late", 2),
                                        ("joint_late", 4), ("media", 3)])
def test_mesh_steps_equal_one_process_holding_every_item(tmp_path, case, hosts):
    if case == "media":
        formats = uform.capabilities().media_formats
        if "png" not in formats.get("image", ()) or "wav" not in formats.get("audio", ()):
            pytest.skip("this build decodes no PNG or no WAV (libpng, libsndfile)")
    processes, outputs = start_hosts(tmp_path, case, hosts)
    reference = one_process(case)
    results = finish(processes, outputs)
    assert_same_run(reference, results)
    assert len({r["run_id"] for r in results}) == 1
    assert [r["rank"] for r in results] == list(range(hosts))


def test_mesh_description_and_bootstrap_of_one_host(tmp_path):
    executor = uform.Executor.for_ram(1)
    mesh = uform.Mesh.bootstrap(executor, uform.MeshOptions(
        host_domain_index=0, host_domain_count=1, directory=tmp_path, job="alone", timeout_ms=1000))
    description = mesh.describe()
    assert isinstance(description, uform.MeshDescription)
    assert (description.host_domain_index, description.host_domain_count) == (0, 1)
    assert (description.rank, description.ranks, description.devices) == (0, 1, (1,))
    assert description.multimem_tier == uform.MultimemTier.NONE and description.gpu_class is None
    assert description.engine == "gloo" and len(description.run_id) == 32
    assert description.timeout_ms == 1000
    default = uform.Mesh.bootstrap(executor, uform.MeshOptions(
        host_domain_index=0, host_domain_count=1, directory=os.fsencode(tmp_path), job="default"))
    assert default.describe().timeout_ms == 300000
    # a mesh of one host trains exactly as no mesh (the world is this process)
    case = "contrastive"
    trainer = uform.Trainer.init_ram(executor, mesh=mesh, **trainer_keywords(case))
    meshed = run_steps(trainer, case, range(1, 3))
    alone = one_process(case, range(1, 3))
    assert meshed["stats"] == alone["stats"]
    np.testing.assert_array_equal(trainer.tensor("blocks.0.attention.qkv.weight"),
                                  alone["tensors"]["blocks.0.attention.qkv.weight"])
    with pytest.raises(uform.InvalidArgumentError, match="another trainer uses this mesh"):
        uform.Trainer.init_ram(executor, mesh=mesh, **trainer_keywords(case))
    with pytest.raises(uform.InvalidArgumentError, match="another executor"):
        uform.Trainer.init_ram(uform.Executor.for_ram(1), mesh=default, **trainer_keywords(case))
    del trainer
    import gc
    gc.collect()
    uform.Trainer.init_ram(executor, mesh=mesh, **trainer_keywords(case))   # free again


def test_bad_mesh_options(tmp_path):
    executor = uform.Executor.for_ram(1)

    def bootstrap(**fields):
        options = dict(host_domain_index=0, host_domain_count=1, directory=tmp_path, job="ok", timeout_ms=500)
        options.update(fields)
        return uform.Mesh.bootstrap(executor, uform.MeshOptions(**options))

    with pytest.raises(uform.InvalidArgumentError, match="host_domain_count"):
        bootstrap(host_domain_count=0)
    with pytest.raises(uform.InvalidArgumentError, match="host_domain_index"):
        bootstrap(host_domain_index=2, host_domain_count=2)
    with pytest.raises(uform.InvalidArgumentError, match="job"):
        bootstrap(job="../escape")
    with pytest.raises(uform.InvalidArgumentError, match="job"):
        bootstrap(job="")
    with pytest.raises(uform.InvalidArgumentError, match="directory"):
        bootstrap(directory=None)
    with pytest.raises(uform.InvalidArgumentError, match="directory"):
        bootstrap(directory="bad\0path")
    with pytest.raises(uform.InvalidArgumentError, match="job"):
        uform.MeshOptions(job=b"bytes")
    with pytest.raises(uform.InvalidArgumentError, match="timeout_ms"):
        uform.MeshOptions(timeout_ms=-1)
    with pytest.raises(uform.InvalidArgumentError, match="executor"):
        uform.Mesh.bootstrap(None, uform.MeshOptions(directory=tmp_path, job="x", host_domain_count=1))
    with pytest.raises(uform.InvalidArgumentError, match="mesh"):
        uform.Trainer.init_ram(executor, mesh="not a mesh")
    with pytest.raises(TypeError):
        uform.Mesh()
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    with pytest.raises(uform.FileError):
        bootstrap(directory=blocker / "below")


def test_a_host_that_never_arrives_is_named(tmp_path):
    started = time.monotonic()
    processes, outputs = start_hosts(tmp_path, "contrastive", 3, started=[0, 1], common=dict(timeout_ms=1500))
    results = finish(processes, outputs, timeout=60)
    for result in results:
        assert result["error"][0] == "MeshError", result
    assert "host 2" in results[0]["error"][1] and "did not arrive" in results[0]["error"][1]
    assert "host 0" in results[1]["error"][1]
    assert time.monotonic() - started < 30


def test_a_host_killed_mid_run_is_named_within_the_timeout(tmp_path):
    processes, outputs = start_hosts(tmp_path, "contrastive", 3, common=dict(timeout_ms=8000),
                                     per_host={2: dict(die_at=2)})
    results = finish(processes, outputs, timeout=90)
    assert results[2].get("killed") == -signal.SIGKILL
    for result in results[:2]:
        name, message = result["error"]
        assert name == "MeshError", result
        assert "lost host 2" in message, message
        assert result["seconds"] < 8 + 6 + 20     # the timeout, the note wait, start-up


def test_a_host_that_hangs_is_named_after_the_timeout(tmp_path):
    processes, outputs = start_hosts(tmp_path, "contrastive", 3, common=dict(timeout_ms=3000),
                                     per_host={1: dict(hang_at=2)})
    try:
        started = time.monotonic()
        survivors = finish([processes[0], processes[2]], [outputs[0], outputs[2]], timeout=90)
        elapsed = time.monotonic() - started
    finally:
        processes[1].kill()      # SIGKILL ends a stopped process too
        processes[1].wait()
    for result in survivors:
        name, message = result["error"]
        assert name == "MeshError" and "lost host 1" in message, result
    assert elapsed < 3 + 4 + 30     # the timeout, the note wait, start-up and two steps


def test_deferred_steps_on_a_mesh(tmp_path):
    processes, outputs = start_hosts(tmp_path, "joint_late", 2, common=dict(deferred=True))
    assert_same_run(one_process("joint_late"), finish(processes, outputs))


def test_bags_on_one_host_only_are_refused_on_every_host(tmp_path):
    processes, outputs = start_hosts(tmp_path, "contrastive", 2, common=dict(timeout_ms=10000),
                                     per_host={1: dict(no_bags=True)})
    for result in finish(processes, outputs, timeout=60):
        assert result["error"][0] in ("InvalidArgumentError", "MeshError"), result
        assert "bags" in result["error"][1]


def test_a_stale_directory_of_an_earlier_run_is_never_read(tmp_path):
    # an earlier run of the same job, killed mid-run: its files stay
    processes, outputs = start_hosts(tmp_path, "contrastive", 2, common=dict(timeout_ms=5000, die_at=2))
    finish(processes, outputs, timeout=60)
    job_folder = tmp_path / "exchange" / "run"
    assert any(job_folder.iterdir())
    (job_folder / "hello.1").write_text("0" * 32)            # and a stale hello of host 1
    processes, outputs = start_hosts(tmp_path, "contrastive", 2, common=dict(timeout_ms=20000))
    reference = one_process("contrastive")
    assert_same_run(reference, finish(processes, outputs))


def test_two_jobs_share_one_directory(tmp_path):
    first = start_hosts(tmp_path, "contrastive", 2, job="first")
    second = start_hosts(tmp_path, "joint_late", 2, job="second")
    results_first, results_second = finish(*first), finish(*second)
    assert_same_run(one_process("contrastive"), results_first)
    assert_same_run(one_process("joint_late"), results_second)
    assert results_first[0]["run_id"] != results_second[0]["run_id"]


@pytest.mark.parametrize("host_spec,field", [
    (dict(override=dict(hidden=128)), "hidden"),
    (dict(override_batch_columns=40), "batch.max_columns_per_row"),
    (dict(override=dict(seed=12)), "seed"),
])
def test_a_host_with_another_shape_is_refused_naming_the_field(tmp_path, host_spec, field):
    processes, outputs = start_hosts(tmp_path, "contrastive", 2, common=dict(timeout_ms=10000),
                                     per_host={1: host_spec})
    for result in finish(processes, outputs, timeout=60):
        assert result["error"][0] == "MeshError", result
        assert field in result["error"][1] and "host 1" in result["error"][1]


def test_save_on_the_mesh_then_resume_on_one_process(tmp_path):
    checkpoint = tmp_path / "shared.safetensors"
    processes, outputs = start_hosts(tmp_path, "joint_late", 2,
                                     common=dict(steps=[1, 3], save=str(checkpoint)))
    results = finish(processes, outputs)
    assert all(r["error"] is None for r in results), results
    assert checkpoint.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("shared")) == [checkpoint.name]
    resumed = one_process("joint_late", range(3, 4), resume=str(checkpoint))
    straight = one_process("joint_late", range(1, 4))
    np.testing.assert_allclose(resumed["stats"][0], straight["stats"][2], rtol=2e-5, atol=1e-7)
    for name, values in straight["tensors"].items():
        assert np.abs(resumed["tensors"][name] - values).max() <= 2 * sum(LEARNING_RATES), name
    # and the mesh resumes it too, every host reading the same file
    processes, outputs = start_hosts(tmp_path, "joint_late", 2, job="again",
                                     common=dict(steps=[3, 4], resume=str(checkpoint)))
    again = finish(processes, outputs)
    for result in again:
        assert result["error"] is None, result
        np.testing.assert_allclose(result["stats"][0], resumed["stats"][0], rtol=2e-5, atol=1e-7)


def test_a_bad_batch_on_one_host_fails_every_host(tmp_path):
    # host 1 names a candidate past the world's items: it fails with its own error, and the
    # others with a MeshError naming it; no host applies the step
    processes, outputs = start_hosts(tmp_path, "contrastive", 2, common=dict(timeout_ms=10000),
                                     per_host={1: dict(bad_edge=True)})
    results = finish(processes, outputs, timeout=60)
    assert results[1]["error"][0] == "InvalidArgumentError" and "relations.attract" in results[1]["error"][1]
    assert results[0]["error"][0] == "MeshError" and "host 1" in results[0]["error"][1]
    assert "relations.attract" in results[0]["error"][1]
