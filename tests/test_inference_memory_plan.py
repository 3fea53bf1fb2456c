"""The memory plan's budget line says whose memory it is: on a CPU run, the GPU's the plan is
for (an H200's), not a verdict on the machine the bench runs on."""

from __future__ import annotations

from inference import bench, memory


def test_a_cpu_run_says_the_budget_is_the_gpus_the_plan_is_for():
    cfg = bench.preset_config("tiny")
    plan = memory.memory_plan(cfg, 1024, 8, 64, 4)
    cpu = "\n".join(memory.format_plan(plan, cfg, device="cpu"))
    assert "against an H200's 141 GB = 131.3 GiB, the GPU the plan is for" in cpu
    assert "(this run is on a CPU): it would fit there" in cpu
    assert ": fits" not in cpu and "fits as well" not in cpu
    for device in (None, "cuda", "cuda:0"):
        text = "\n".join(memory.format_plan(plan, cfg, device=device))
        assert "of 141 GB = 131.3 GiB: fits" in text and "CPU" not in text
    small = memory.memory_plan(cfg, 1024, 8, 64, 4, gpu_bytes=1e5)
    cpu_small = "\n".join(memory.format_plan(small, cfg, device="cpu"))
    assert "against a GPU's 0 GB" in cpu_small and "it WOULD NOT FIT there" in cpu_small
