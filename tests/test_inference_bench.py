"""The benchmark's code paths and the memory arithmetic (not its figures: speed is measured by
running the benchmark)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from inference import bench, memory

FULL = "qwen3.5-35b-a3b"


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_full_qwen35_35b_a3b_architecture_builds_on_the_meta_device():
    from transformers import Qwen3_5MoeForCausalLM

    cfg = bench.preset_config(FULL)
    assert cfg.num_hidden_layers == 40 and cfg.num_experts == 256
    assert cfg.layer_types.count("full_attention") == 10
    assert cfg.layer_types.count("linear_attention") == 30
    model = bench.build_model(FULL, "meta")  # the bench's own code path
    assert isinstance(model, Qwen3_5MoeForCausalLM)
    assert all(p.device.type == "meta" for p in model.parameters())
    params = sum(p.numel() for p in model.parameters())
    assert 33e9 < params < 37e9  # 35B total parameters
    # The memory plan counts the same parameters from the config alone.
    assert abs(memory.count_params(cfg) - params) <= 0.01 * params
    preset = bench.PRESETS[FULL]
    assert (preset.prompt_tokens, preset.branches, preset.new_tokens) == (4096, 16, (64,))
    big = bench.PRESETS["qwen3.5-35b-a3b-100k"]
    assert (big.prompt_tokens, big.branches, big.sides) == (100_000, 64, ("engine",))
    assert bench.preset_config(big.name).to_dict() == cfg.to_dict()


def test_tiny_preset_shape():
    preset = bench.PRESETS["tiny"]
    assert preset.new_tokens == (16, 256, 1024)
    assert preset.sides == ("naive", "batched", "engine")
    assert preset.profile and preset.repeat >= 3 and preset.naive_repeat == 1
    # --preset tiny also runs the longer shared prefix, on the same architecture
    assert preset.follow == ("tiny-long",)
    long = bench.PRESETS["tiny-long"]
    assert long.prompt_tokens == 4096 and long.branches == preset.branches
    assert bench.preset_config("tiny-long").to_dict() == bench.preset_config("tiny").to_dict()
    cfg = bench.preset_config("tiny")
    assert {"linear_attention", "full_attention"} == set(cfg.layer_types)
    model = bench.build_model("tiny", "meta")
    assert memory.count_params(cfg) == sum(p.numel() for p in model.parameters())


def test_memory_plan_of_n64_at_100k_fits_an_h200():
    cfg = bench.preset_config(FULL)
    plan = memory.memory_plan(cfg, 100_000, 64, 64, 2, suffix_tokens=32)
    assert plan.kv_bytes_per_token == 20480  # 10 full layers x 2 x 2 kv heads x 256 x 2 bytes
    assert plan.prefix_kv_bytes == 100_000 * 20480
    # 30 linear layers x (conv 8192 x 4 x 2 B + recurrent 32 x 128 x 128 x 4 B)
    assert plan.branch_state_bytes == 30 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)
    assert plan.branch_suffix_kv_bytes == (32 + 64) * 20480
    assert plan.total_bytes == (
        plan.weights_bytes + plan.prefix_kv_bytes + 64 * plan.per_branch_bytes
    )
    assert plan.total_bytes < 141e9 and plan.fits
    assert plan.copied_prefix_total_bytes > 141e9  # 64 copies of the prefix would not
    lines = memory.format_plan(plan, cfg)
    text = "\n".join(lines)
    assert "20,480 B" in text and "fits" in text and "DOES NOT FIT" not in text
    # A smaller GPU says so.
    small = memory.memory_plan(cfg, 100_000, 64, 64, 2, gpu_bytes=40e9)
    assert not small.fits
    assert "DOES NOT FIT" in "\n".join(memory.format_plan(small, cfg))


def test_memory_plan_matches_what_the_cache_holds():
    """The per-token KV and per-branch state of the plan are what a transformers cache holds
    after a real forward of the tiny model in bf16 (conv state at the model's dtype, recurrent
    state in float32)."""
    from transformers import DynamicCache

    from inference.tiny import tiny_config

    cfg = tiny_config(640, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    from transformers import Qwen3_5MoeForCausalLM

    model = Qwen3_5MoeForCausalLM(cfg).to(torch.bfloat16).eval()  # type: ignore[arg-type]
    batch, tokens = 3, 20
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.randint(3, 640, (batch, tokens)), cache=cache, use_cache=True)
    kv = state = 0
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if t is not None and t.numel():
                kv += t.numel() * t.element_size()
        for states in (getattr(layer, "conv_states", {}), getattr(layer, "recurrent_states", {})):
            for t in states.values():
                if t is not None:
                    state += t.numel() * t.element_size()
    plan = memory.memory_plan(cfg, tokens, batch, 0, 2)
    assert kv == batch * tokens * plan.kv_bytes_per_token
    assert state == batch * plan.branch_state_bytes


def test_plan_only_prints_the_arithmetic_without_a_model(capsys, monkeypatch):
    def no_model(*a, **k):
        raise AssertionError("--plan must not build a model")

    monkeypatch.setattr(bench, "build_model", no_model)
    assert bench.main(["--plan", "--preset", "qwen3.5-35b-a3b-100k"]) == 0
    out = capsys.readouterr().out
    assert "P=100000 N=64 T=64" in out
    assert "prefix KV (once)     100,000 tokens x 20,480 B = 2,048,000,000 B" in out
    assert re.search(r"total .* of 141 GB = 131\.3 GiB: fits", out)


def test_inputs_identical_and_differing():
    same = bench.make_inputs(640, 50, 4, "identical")
    assert len(same) == 4 and all(b == same[0] for b in same) and len(same[0]) == 50
    diff = bench.make_inputs(640, 50, 4, "differing", (8, 32))
    assert [len(b) - 50 for b in diff] == [8, 16, 24, 32]  # lengths differ: padding is exercised
    assert all(b[:50] == same[0] for b in diff)  # one shared prefix
    assert len({tuple(b[50:58]) for b in diff}) == 4
    assert bench.make_inputs(640, 50, 4, "differing") == diff  # seeded


@pytest.mark.parametrize("kernel_mark", [True, False])
def test_peak_memory_on_cpu_sees_a_transient_allocation(monkeypatch, kernel_mark):
    """The kernel's peak-RSS mark where it can be reset, else the sampling thread: either way
    64 MiB held for a moment and freed shows, and the RSS before the block is not counted."""
    if not kernel_mark:
        monkeypatch.setattr(bench, "_reset_hwm", lambda: False)
    keep = torch.ones(16 * 2**20 // 4)  # 16 MiB already there: not counted
    with bench.PeakMemory("cpu") as mem:
        block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        mem.wait_for_sample()  # the sampler has seen the block (no-op with the kernel's mark)
        del block
    assert 60 * 2**20 <= mem.peak < 75 * 2**20
    assert ("VmHWM" in bench.PeakMemory.describe("cpu")) is kernel_mark
    del keep


def _speedups(out: list[str]) -> list[tuple[str, str]]:
    pat = re.compile(r"speedup: (\d+\.\d\d)x over (naive|batched)")
    return [m.groups() for line in out if (m := pat.fullmatch(line))]


def test_bench_runs_every_side_and_prints_speedups(capsys, keep_threads):
    code = bench.main(
        [
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--prompt-tokens",
            "64",
            "--branches",
            "3",
            "--new-tokens",
            "4,6",
        ]
    )
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert any(line.startswith("memory plan: P=64 N=3 T=6") for line in out)
    assert any(line.startswith("peak memory = ") and "RSS" in line for line in out)
    headers = [line for line in out if line.startswith("[")]
    assert headers == [
        "[identical suffixes, T=4, P=64, N=3, suffix +0]",
        "[differing suffixes, T=4, P=64, N=3, suffix +32]",
        "[identical suffixes, T=6, P=64, N=3, suffix +0]",
        "[differing suffixes, T=6, P=64, N=3, suffix +32]",
    ]
    sides = [line.split()[0] for line in out if line.startswith("  ") and "tok/s" in line]
    assert sides == ["naive", "batched", "engine"] * 4
    lines = [line.strip() for line in out]
    naive = [line for line in lines if line.startswith("naive ")]
    batched = [line for line in lines if line.startswith("batched ")]
    engine = [line for line in lines if line.startswith("engine ")]
    assert naive[0].startswith("naive    12 tokens in ")  # 3 branches x T=4
    assert engine[2].startswith("engine   18 tokens in ")  # 3 x T=6
    assert all(re.search(r"peak \d+\.\d MiB", line) for line in naive + batched + engine)
    # Prompt tokens computed: naive runs the prefix per branch, the engine once.
    assert "prompt tokens computed 192;" in naive[0]  # 3 x 64
    assert "prompt tokens computed 64;" in engine[0]  # identical: 63 once + the last token once
    assert "prompt tokens computed 252;" in naive[1]  # 3 x 64 + 8 + 20 + 32
    assert "prompt tokens computed 288;" in batched[1]  # 3 rows x (64 + 32) with padding
    assert "prompt tokens computed 124;" in engine[1]  # 64 once + 8 + 20 + 32
    assert all("outputs = naive: yes" in line for line in batched + engine)
    assert [other for _, other in _speedups(out)] == ["naive", "batched"] * 4
    assert out[-2] == "  greedy outputs equal naive's: batched yes, engine yes"


def test_engine_differing_from_naive_exits_1(capsys, keep_threads, monkeypatch):
    real = bench.run_engine

    def wrong(model, branches, t, device):
        result = real(model, branches, t, device)
        result.branches[-1].tokens[-1] += 1
        return result

    monkeypatch.setattr(bench, "run_engine", wrong)
    argv = ["--device", "cpu", "--prompt-tokens", "32", "--branches", "2", "--new-tokens", "3"]
    code = bench.main([*argv, "--suffix", "identical", "--sides", "naive,engine"])
    out = capsys.readouterr().out
    assert code == 1
    assert "outputs = naive: NO (1/2 branches differ; branch 1 at token 2)" in out
    assert re.search(r"^speedup: \d+\.\d\dx over naive$", out, re.M)
    assert "over batched" not in out
    assert "greedy outputs equal naive's: engine NO" in out


class _FakeOpenAI(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def log_message(self, *args):  # quiet
        pass

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(
            {
                "object": "list",
                "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "me"}],
            }
        )

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, **body})
        n, t = body.get("n", 1), body["max_tokens"]
        prompt = body["prompt"]
        choices = [
            {"index": i, "text": " tok" * t, "finish_reason": "length", "logprobs": None}
            for i in range(n)
        ]
        self._send(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 0,
                "model": body["model"],
                "choices": choices,
                "usage": {
                    "prompt_tokens": len(prompt),
                    "completion_tokens": n * t,
                    "total_tokens": len(prompt) + n * t,
                },
            }
        )


def test_served_side_against_a_fake_server(capsys, keep_threads):
    _FakeOpenAI.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        code = bench.main(
            [
                "--device",
                "cpu",
                "--sides",
                "served",
                "--url",
                url,
                "--model",
                "fake",
                "--prompt-tokens",
                "40",
                "--branches",
                "3",
                "--new-tokens",
                "5",
                "--repeat",
                "1",
            ]
        )
    finally:
        server.shutdown()
        server.server_close()
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    served = [line.strip() for line in out if line.strip().startswith("served")]
    assert len(served) == 2
    assert served[0].startswith("served   15 tokens in ")  # 3 x 5, counted from usage
    assert "peak n/a (server)" in served[0] and "1 request, n=N" in served[0]
    assert "3 requests" in served[1]
    timed = _FakeOpenAI.requests[-4:]  # the last identical request and the 3 differing ones
    posts = [r for r in _FakeOpenAI.requests if r["path"] == "/v1/completions"]
    # warm-up (1 + 3) and timed (1 + 3) requests; identical: one request with n=3
    assert len(posts) == 8
    identical = [r for r in posts if r.get("n") == 3]
    assert len(identical) == 2 and all(len(r["prompt"]) == 40 for r in identical)
    assert all(isinstance(x, int) for x in identical[0]["prompt"])  # token ids, not text
    differing = [r for r in timed if r.get("n", 1) == 1]
    assert sorted(len(r["prompt"]) for r in differing) == [48, 60, 72]
    assert [r["max_tokens"] for r in timed] == [5] * 4  # the warm-up asked for 2
    assert all(r["min_tokens"] == r["max_tokens"] and r["ignore_eos"] for r in posts)
    assert all(r["temperature"] == 0 for r in posts)
    assert bench.main(["--sides", "served", "--device", "cpu"]) == 2  # needs --url


def test_new_options_parse():
    args = bench.parse_args(["--naive-repeat", "2", "--repeat", "4", "--no-profile"])
    assert (args.naive_repeat, args.repeat, args.profile) == (2, 4, False)
    assert bench.parse_args(["--profile"]).profile is True
    assert bench.parse_args([]).profile is None  # the preset's (on for tiny)
    for bad in (["--repeat", "0"], ["--naive-repeat", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def _result(side: str, seconds: float) -> bench.SideResult:
    return bench.SideResult(side, seconds, 1, 0, [[1]])


def test_rounds_interleave_the_sides_and_short_cases_get_more():
    order: list[str] = []

    def runner(side):
        def run():
            order.append(side)
            return _result(side, 1.0)

        return run

    runs = {s: runner(s) for s in ("naive", "batched", "engine")}
    rounds = bench.measure_rounds(runs, "cpu", 3, {"naive": 1})
    assert order == ["naive", "batched", "engine", "batched", "engine", "batched", "engine"]
    assert [len(rounds[s]) for s in ("naive", "batched", "engine")] == [1, 3, 3]
    order.clear()
    # under a time budget no case can miss, the rounds go on to max_rounds
    rounds = bench.measure_rounds(runs, "cpu", 2, {"naive": 1}, min_seconds=1e9, max_rounds=5)
    assert [len(rounds[s]) for s in ("naive", "batched", "engine")] == [1, 5, 5]
    assert order[:3] == ["naive", "batched", "engine"] and order[3:5] == ["batched", "engine"]


def test_speedup_is_the_median_of_paired_rounds():
    engine = [_result("engine", x) for x in (1.0, 2.0, 1.0)]
    batched = [_result("batched", x) for x in (3.0, 2.0, 1.5)]  # ratios 3, 1, 1.5
    ratio, text = bench.speedup(batched, engine)
    assert ratio == 1.5
    assert "median of 3 paired rounds: 1.00, 1.50, 3.00" in text
    assert "best against best 1.50x" in text
    ratio, text = bench.speedup([_result("naive", 6.0)], engine)  # one run: against the median
    assert ratio == 6.0 and "its one run against the engine's median of 3" in text
    best = bench.best_of(engine)
    assert best.seconds == 1.0


def test_tiny_runs_its_long_prefix_section_and_prints_the_profile(
    capsys, keep_threads, monkeypatch
):
    """--preset tiny: its cases, then tiny-long's (P=4096 in the real preset, shrunk here),
    each with the prefix saving per case and the decode-step profile at the largest T."""
    import dataclasses

    tiny = dataclasses.replace(
        bench.PRESETS["tiny"], prompt_tokens=48, new_tokens=(3,), repeat=2, max_rounds=0
    )
    long = dataclasses.replace(
        bench.PRESETS["tiny-long"], prompt_tokens=96, new_tokens=(4,), repeat=2, max_rounds=0
    )
    monkeypatch.setitem(bench.PRESETS, "tiny", tiny)
    monkeypatch.setitem(bench.PRESETS, "tiny-long", long)
    assert bench.main(["--preset", "tiny", "--device", "cpu", "--branches", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    headers = [line for line in out if line.startswith("[")]
    assert headers == [
        "[identical suffixes, T=3, P=48, N=2, suffix +0]",
        "[differing suffixes, T=3, P=48, N=2, suffix +32]",
        "[identical suffixes, T=4, P=96, N=2, suffix +0]",
        "[differing suffixes, T=4, P=96, N=2, suffix +32]",
    ]
    assert any(line.startswith("preset tiny-long: P=96 N=2 T=4") for line in out)
    saving = [line for line in out if line.startswith("prefix saving: ")]
    assert len(saving) == 4
    assert "prompt tokens run engine 96, naive 192, batched 192;" in saving[2]
    assert "prefix KV 0.0 MiB held once (batched holds a copy per branch: 2 x" in saving[2]
    profiles = [i for i, line in enumerate(out) if line.startswith("profile of the engine's")]
    assert len(profiles) == 4  # at the largest T of each section, per mode
    assert "(direct step;" in out[profiles[0]]
    table = out[profiles[0] + 1 : profiles[0] + 12]
    rows = [line for line in table if re.fullmatch(r"  .+ +\d+\.\d{3} ms/step +\d+\.\d%", line)]
    names = {line.rsplit(None, 3)[0].strip() for line in rows}
    assert {"full attention (prefix + suffix KV)", "linear attention (recurrent layers)"} <= names
    assert {"sampler", "MoE routed experts", "norms"} <= names
    assert any("for comparison, the model's forward as the step" in line for line in table)
    # two paired rounds per case: each speedup says how it was formed
    assert sum("median of 2 paired rounds" in line for line in out) == 4  # over batched
    summary = out[out.index(next(x for x in out if x.startswith("summary (tiny"))) :]
    assert "  P=48:" in summary and "  P=96:" in summary
    assert [other for _, other in _speedups(out)] == ["naive", "batched"] * 4
    assert "greedy outputs equal naive's: batched yes, engine yes" in out[-2]


def test_no_profile_and_an_explicit_prompt_length_run_one_section(capsys, keep_threads):
    argv = ["--device", "cpu", "--prompt-tokens", "32", "--branches", "2", "--new-tokens", "3"]
    assert bench.main([*argv, "--no-profile", "--repeat", "1", "--suffix", "identical"]) == 0
    out = capsys.readouterr().out
    assert "profile of the engine's" not in out
    assert "preset tiny-long" not in out and "P=4096" not in out
    assert "timing: each case runs its sides in turn, 1 round, naive in the first 1" in out
