"""The branching engine, the sampler, the tiny model and the hf backend, on CPU with the tiny
random qwen3_5_moe model (built once per session)."""

from __future__ import annotations

import weakref

import pytest
import torch

from inference.engine import BranchingEngine, common_prefix_length
from inference.sampler import branch_seeds, sample_next
from tests.support.tiny_model import tiny_model_path  # noqa: F401  (fixture)

T = 16


@pytest.fixture(scope="module")
def loaded(tiny_model_path):  # noqa: F811
    # One intra-op thread: the tiny model gains nothing from more, and on a shared machine
    # oversubscribed OpenMP threads make every op crawl.
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    return model, tokenizer


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def reference(model, ids: list[int], t: int, eos: int | None) -> list[int]:
    """One `model.generate` call, greedy; the new tokens up to (not including) eos."""
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=t,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=0,
        )
    new = out[0, len(ids) :].tolist()
    return new[: new.index(eos)] if eos is not None and eos in new else new


BASE = (
    "### Turn 1\n\n**Task Instruction:**\nCount the log files.\n\n**Action:**\nls /var/log\n"
    "**Environment Observation:**\napp.log sys.log"
)


def test_same_prompt_branches_equal_separate_generate_calls(loaded):
    model, tok = loaded
    ids = encode(tok, BASE)
    engine = BranchingEngine(model, eos_token_ids=[tok.eos_token_id])
    result = engine.generate([ids] * 4, max_new_tokens=T)
    expected = reference(model, ids, T, tok.eos_token_id)
    assert len(expected) > 5
    assert [b.tokens for b in result.branches] == [expected] * 4
    # the prefix is computed once: all but the last prompt token, plus that token once
    assert result.prefix_tokens == len(ids) - 1
    assert result.prefill_tokens == len(ids)
    assert result.prefill_s > 0 and result.decode_s > 0


def test_differing_suffixes_equal_separate_generate_calls(loaded):
    model, tok = loaded
    base = encode(tok, BASE)
    branches = [
        base + encode(tok, " $ cd /var/log"),
        base + encode(tok, " $ cat app.log | head -n 2 and more words"),  # longer suffix
        base,  # the prefix itself
        base + encode(tok, " $ cd /var/log"),  # same as branch 0
        base + encode(tok, " $ rm -rf tmp"),
    ]
    assert len({len(b) for b in branches}) >= 3
    engine = BranchingEngine(model, eos_token_ids=[tok.eos_token_id])
    result = engine.generate(branches, max_new_tokens=T)
    for branch, out in zip(branches, result.branches, strict=True):
        assert out.tokens == reference(model, branch, T, tok.eos_token_id)
    shared = common_prefix_length(branches)
    assert shared == len(base)  # base is a prefix of every branch...
    assert result.prefix_tokens == len(base) - 1  # ...but keeps its last token to get logits
    shared = result.prefix_tokens
    distinct = {tuple(b[shared:]) for b in branches}
    assert result.prefill_tokens == shared + sum(len(s) for s in distinct)


def test_branches_without_a_common_prefix(loaded):
    model, tok = loaded
    branches = [encode(tok, "alpha beta gamma"), encode(tok, "Traceback (most recent call")]
    assert branches[0][0] != branches[1][0]
    result = BranchingEngine(model, eos_token_ids=[tok.eos_token_id]).generate(
        branches, max_new_tokens=12
    )
    assert result.prefix_tokens == 0
    for branch, out in zip(branches, result.branches, strict=True):
        assert out.tokens == reference(model, branch, 12, tok.eos_token_id)


def test_differing_suffixes_with_a_chunked_prefix_prefill(loaded):
    model, tok = loaded
    base = encode(tok, BASE)
    branches = [base + encode(tok, " $ cd /var/log"), base + encode(tok, " $ ls -la and more")]
    engine = BranchingEngine(model, eos_token_ids=[], prefill_chunk=7)  # many prefix chunks
    result = engine.generate(branches, max_new_tokens=20)
    for branch, out in zip(branches, result.branches, strict=True):
        assert out.tokens == reference(model, branch, 20, None)


def test_the_prefix_keys_and_values_are_stored_once_whatever_n(loaded):
    model, tok = loaded
    ids = encode(tok, BASE)
    engine = BranchingEngine(model, eos_token_ids=[])
    one = engine.generate([ids], max_new_tokens=4).cache_bytes
    eight = engine.generate([ids] * 8, max_new_tokens=4).cache_bytes
    assert one["prefix_kv"] > 0
    assert eight["prefix_kv"] == one["prefix_kv"]  # one copy, not one per branch
    # what is per branch is the suffix buffer and the recurrent states
    assert eight["suffix_kv"] == 8 * one["suffix_kv"]
    assert eight["branch_states"] == 8 * one["branch_states"]


def test_per_branch_stop_by_callback_leaves_the_others_running(loaded):
    model, tok = loaded
    ids = encode(tok, BASE)
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def on_tokens(branch, new):
        seen[branch].extend(new)
        return branch == 1 and len(seen[1]) >= 4

    engine = BranchingEngine(model, eos_token_ids=[tok.eos_token_id], sync_every=4)
    result = engine.generate([ids] * 3, max_new_tokens=T, on_tokens=on_tokens)
    expected = reference(model, ids, T, tok.eos_token_id)
    assert len(expected) > 8
    # the callback gets only the new tokens each time; a stopped branch keeps what it was shown
    assert result.branches[1].tokens == seen[1] == expected[:4]
    assert result.branches[1].finish_reason == "cancelled"
    assert result.branches[0].tokens == result.branches[2].tokens == seen[0] == expected


def test_the_host_reads_tokens_every_k_steps_not_every_step(loaded):
    model, tok = loaded
    ids = encode(tok, BASE)
    calls = []
    engine = BranchingEngine(model, eos_token_ids=[], sync_every=5)
    result = engine.generate(
        [ids] * 2, max_new_tokens=T, on_tokens=lambda b, new: calls.append((b, len(new)))
    )
    assert result.decode_steps == T
    # reads after steps 5, 10, 15 and the final one: 4 reads for 16 steps, not 16
    assert result.host_syncs == 4
    assert [n for b, n in calls if b == 0] == [5, 5, 5, 1]
    # without eos ids or a callback nothing needs reading until the end
    quiet = engine.generate([ids] * 2, max_new_tokens=T)
    assert quiet.host_syncs == 1
    assert quiet.graph == "eager"  # CUDA graphs on CUDA only


def test_the_decode_step_keeps_every_buffer_in_place(loaded, monkeypatch):
    """What a CUDA graph needs: no tensor the step reads or writes changes address or shape,
    also when branches finish (they are masked, not dropped)."""
    from inference import engine as engine_mod

    model, tok = loaded
    base = encode(tok, BASE)
    branches = [base + encode(tok, " $ cd /var/log"), base + encode(tok, " $ rm -rf tmp"), base]
    seen = []
    run_step = engine_mod._Decode._run_step

    def spy(self):
        run_step(self)
        cache = self.cache
        tensors = [
            self.logits,
            self.out,
            self.step_t,
            cache.suffix_len,
            *cache.prefix_k.values(),
            *cache.suffix_k.values(),
            *cache.suffix_v.values(),
            *cache._states["decode"]["conv"].values(),
            *cache._states["decode"]["rec"].values(),
        ]
        seen.append(tuple((t.data_ptr(), tuple(t.shape)) for t in tensors))

    monkeypatch.setattr(engine_mod._Decode, "_run_step", spy)
    free = reference(model, branches[0], T, None)
    engine = BranchingEngine(model, eos_token_ids=[free[3]])  # branch 0 ends early
    result = engine.generate(branches, max_new_tokens=T)
    assert result.branches[0].finish_reason == "stop"
    assert len(seen) > 5 and len(set(seen)) == 1


def test_eos_stops_a_branch_and_max_tokens_stops_the_rest(loaded):
    model, tok = loaded
    ids = encode(tok, BASE)
    expected = reference(model, ids, T, None)
    stop_token = expected[4]
    engine = BranchingEngine(model, eos_token_ids=[stop_token])
    result = engine.generate([ids], max_new_tokens=T)
    assert result.branches[0].tokens == expected[: expected.index(stop_token)]
    assert result.branches[0].finish_reason == "stop"
    result = BranchingEngine(model, eos_token_ids=[]).generate([ids], max_new_tokens=6)
    assert result.branches[0].tokens == expected[:6]
    assert result.branches[0].finish_reason == "length"


def test_a_finished_branch_is_masked_and_the_others_go_on(loaded):
    model, tok = loaded
    base = encode(tok, BASE)
    branches = [base + encode(tok, " $ cd /var/log"), base + encode(tok, " $ rm -rf tmp")]
    free = [reference(model, b, T, None) for b in branches]
    # an eos that ends branch 0 early and does not occur in branch 1's text
    stop = next(t for t in free[0][2:] if t not in free[1])
    engine = BranchingEngine(model, eos_token_ids=[stop], sync_every=3)
    result = engine.generate(branches, max_new_tokens=T)
    assert result.branches[0].tokens == free[0][: free[0].index(stop)]
    assert result.branches[0].finish_reason == "stop"
    assert result.branches[1].tokens == free[1]
    assert result.branches[1].finish_reason == "length"


def test_sampling_is_reproducible_per_call_seed(loaded):
    model, tok = loaded
    ids = encode(tok, BASE)
    engine = BranchingEngine(model, eos_token_ids=[])

    def run(seed):
        out = engine.generate([ids] * 3, max_new_tokens=10, temperature=1.0, top_p=0.95, seed=seed)
        return [b.tokens for b in out.branches]

    first = run(11)
    assert run(11) == first
    assert run(12) != first
    assert len({tuple(t) for t in first}) > 1  # the branches of one call differ


def test_a_branch_sample_does_not_depend_on_n_order_or_cancelled_siblings(loaded):
    model, tok = loaded
    ids = encode(tok, BASE)
    engine = BranchingEngine(model, eos_token_ids=[], sync_every=4)

    def run(n, seed=7, on_tokens=None, prompts=None):
        out = engine.generate(
            prompts or [ids] * n,
            max_new_tokens=12,
            temperature=1.0,
            top_p=0.9,
            seed=seed,
            on_tokens=on_tokens,
        )
        return [b.tokens for b in out.branches]

    two, four = run(2), run(4)
    assert four[:2] == two  # branch i is seed + i, whatever N
    # branch 3 of seed 7 is branch 0 of seed 10: its sample is fixed by its own seed
    assert run(1, seed=10)[0] == four[3]
    # siblings stopped after their first read change nothing for branch 0
    stopped = run(4, on_tokens=lambda b, new: b != 0)
    assert stopped[0] == four[0]
    assert all(len(t) < 12 for t in stopped[1:])
    # differing prompts: a branch's text is the same alone or with others
    other = ids + encode(tok, " $ cd /tmp")
    assert run(2, prompts=[ids, other])[1] == run(2, seed=7, prompts=[other, other])[1]


def test_the_direct_step_is_the_cpu_default_and_equals_the_model_forward(loaded):
    """On a CPU the decode step is the engine's own (the decoder layers' arithmetic); the
    model's forward as the step gives the same greedy tokens, which equal `generate`'s, with
    differing suffix lengths, an eos stop and a callback cancel; and the same seeded samples."""
    model, tok = loaded
    base = encode(tok, BASE)
    branches = [
        base + encode(tok, " $ cd /var/log"),
        base + encode(tok, " $ cat app.log | head -n 2 and more words"),
        base,
    ]
    free = [reference(model, b, T, None) for b in branches]
    stop = next(t for t in free[0][2:] if t not in free[1])  # ends branch 0 early only
    results = {}
    for direct in (None, False):
        engine = BranchingEngine(model, eos_token_ids=[stop], direct_step=direct)
        results[direct] = engine.generate(
            branches, max_new_tokens=T, on_tokens=lambda b, new: b == 2 and len(new) > 0
        )
    fast, slow = results[None], results[False]
    assert (fast.decode_path, slow.decode_path) == ("direct step", "model forward")
    assert [b.tokens for b in fast.branches] == [b.tokens for b in slow.branches]
    assert fast.branches[0].tokens == free[0][: free[0].index(stop)]
    assert fast.branches[0].finish_reason == "stop"
    assert fast.branches[1].tokens == free[1] and fast.branches[1].finish_reason == "length"
    assert fast.branches[2].tokens == free[2][:1] and fast.branches[2].finish_reason == "cancelled"

    def sample(direct):
        out = BranchingEngine(model, direct_step=direct).generate(
            branches, max_new_tokens=12, temperature=0.9, top_p=0.9, seed=5
        )
        return [b.tokens for b in out.branches]

    assert sample(True) == sample(False)


def test_the_direct_step_with_the_models_experts_module(loaded, monkeypatch):
    """With many experts the direct step hands the expert products to the model's experts
    module (its configured implementation) instead of running every expert densely."""
    from inference import engine as engine_mod

    model, tok = loaded
    monkeypatch.setattr(engine_mod, "DENSE_EXPERTS_FACTOR", 0)
    monkeypatch.setattr(engine_mod, "_DIRECT_CACHE", weakref.WeakKeyDictionary())
    weights = engine_mod._direct_weights(model)
    assert not any(layer.dense_experts for layer in weights.layers)
    base = encode(tok, BASE)
    branches = [base + encode(tok, " $ cd /var/log"), base + encode(tok, " $ rm -rf tmp")]
    result = BranchingEngine(model, eos_token_ids=[]).generate(branches, max_new_tokens=T)
    assert result.decode_path == "direct step"
    for branch, out in zip(branches, result.branches, strict=True):
        assert out.tokens == reference(model, branch, T, None)


def test_the_direct_step_follows_weights_written_in_place(loaded):
    """Its concatenated weights are copies: after load_state_dict (in place) it must read the
    new weights, as the model's forward does."""
    import copy

    model, tok = loaded
    clone = copy.deepcopy(model)
    ids = encode(tok, BASE)
    before = BranchingEngine(clone, eos_token_ids=[]).generate([ids], max_new_tokens=T)
    torch.manual_seed(3)
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in clone.state_dict().items()}
    clone.load_state_dict(state)
    runs = [
        BranchingEngine(clone, eos_token_ids=[], direct_step=d).generate([ids], max_new_tokens=T)
        for d in (True, False)
    ]
    assert runs[0].branches[0].tokens == runs[1].branches[0].tokens
    assert runs[0].branches[0].tokens != before.branches[0].tokens


def test_the_direct_step_is_not_the_default_in_bf16(loaded):
    """In bf16 its rounding differs from the model's forward enough to change greedy tokens
    after a few dozen, so a bf16 model decodes with the forward unless asked; asked, the
    direct step runs (its bf16 casts) and starts with the forward's tokens."""
    import copy

    model, tok = loaded
    half = copy.deepcopy(model).to(torch.bfloat16)
    ids = encode(tok, BASE)
    default = BranchingEngine(half, eos_token_ids=[]).generate([ids] * 2, max_new_tokens=4)
    assert default.decode_path == "model forward"
    asked = BranchingEngine(half, eos_token_ids=[], direct_step=True).generate(
        [ids] * 2, max_new_tokens=4
    )
    assert asked.decode_path == "direct step"
    assert asked.branches[0].tokens[:2] == default.branches[0].tokens[:2]


def test_a_step_profile_names_where_the_decode_time_goes(loaded):
    from inference.engine import StepProfile

    model, tok = loaded
    ids = encode(tok, BASE)
    for direct, expected in (
        (True, {"full attention (prefix + suffix KV)", "linear attention (recurrent layers)"}),
        (False, {"model forward (all layers)"}),
    ):
        profile = StepProfile("cpu")
        result = BranchingEngine(model, eos_token_ids=[], direct_step=direct).generate(
            [ids] * 2, max_new_tokens=8, profile=profile
        )
        # the first token comes from the prefill's logits: 7 decode steps for 8 tokens
        assert profile.steps == result.decode_steps - 1 == 7
        assert expected | {"sampler"} <= set(profile.seconds)
        rows = profile.rows()
        assert abs(sum(share for _, _, share in rows) - 1.0) < 1e-9
        assert [ms for _, ms, _ in rows] == sorted((ms for _, ms, _ in rows), reverse=True)
        # a profiled run decodes the same tokens
        plain = BranchingEngine(model, eos_token_ids=[], direct_step=direct).generate(
            [ids] * 2, max_new_tokens=8
        )
        assert [b.tokens for b in plain.branches] == [b.tokens for b in result.branches]


def test_engine_rejects_bad_input(loaded):
    model, _ = loaded
    engine = BranchingEngine(model)
    with pytest.raises(ValueError, match="no branches"):
        engine.generate([], max_new_tokens=2)
    with pytest.raises(ValueError, match="at least one prompt token"):
        engine.generate([[1, 2], []], max_new_tokens=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate([[1, 2]], max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        engine.generate([[1, 2]], max_new_tokens=2, temperature=1.0, top_p=0)
    with pytest.raises(ValueError, match="sync_every"):
        BranchingEngine(model, sync_every=0)


def test_the_engine_leaves_the_model_as_it_was(loaded):
    model, tok = loaded
    before = model.config._attn_implementation
    BranchingEngine(model).generate([encode(tok, BASE)], max_new_tokens=2)
    assert model.config._attn_implementation == before


def test_the_cache_records_no_past_for_a_rollback():
    """transformers (>= 5.25) asks a cache how many intermediate recurrent states a linear-
    attention layer must keep for a rollback (assisted decoding); the engine never rolls back,
    so none, for any layer, and a list of them (what a layer told otherwise would hand over)
    is refused rather than stored as a state."""
    from inference.shared_cache import SharedPrefixCache

    cache = SharedPrefixCache(
        ["linear_attention", "full_attention"],
        rows=2,
        prefix_capacity=4,
        suffix_capacity=4,
        device="cpu",
    )
    assert not cache.is_recording_past(0)
    assert cache.get_recurrent_states_to_keep(0) == cache.get_recurrent_states_to_keep() == 0
    state = torch.ones(1, 2, 3, 3)
    assert torch.equal(cache.update_recurrent_state(state, 0), state)
    with pytest.raises(TypeError, match="keeps only the last state"):
        cache.update_recurrent_state([state, state], 0)
    assert torch.equal(cache.get_recurrent_state(0), state)


# -- the sampler --------------------------------------------------------------------------------


def test_sampler_greedy_and_top_p():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 2.9]])
    assert sample_next(logits, temperature=0).tolist() == [1, 0]
    seeds = torch.tensor([1, 2])
    # top_p small keeps only the most likely token of each row
    for step in range(20):
        assert sample_next(
            logits, temperature=1.0, top_p=0.01, seeds=seeds, step=step
        ).tolist() == [
            1,
            0,
        ]
    # with top_p 1 the second row draws both near-equal tokens over many steps
    draws = {
        sample_next(logits, temperature=1.0, seeds=seeds, step=step)[1].item()
        for step in range(200)
    }
    assert draws >= {0, 2}


def test_sampler_draws_follow_the_softmax():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    counts = torch.zeros(3)
    for step in range(3000):
        counts[sample_next(logits, temperature=1.0, seeds=torch.tensor([3]), step=step)] += 1
    assert torch.allclose(counts / 3000, torch.tensor([0.6, 0.3, 0.1]), atol=0.03)


def test_sampler_rows_are_independent_of_the_batch():
    logits = torch.randn(4, 50)
    seeds = torch.tensor([5, 6, 7, 8])
    batch = sample_next(logits, temperature=0.8, seeds=seeds, step=3).tolist()
    alone = [
        sample_next(logits[i : i + 1], temperature=0.8, seeds=seeds[i : i + 1], step=3).item()
        for i in range(4)
    ]
    assert batch == alone
    assert batch == sample_next(logits, temperature=0.8, seeds=seeds, step=3).tolist()
    other_step = sample_next(logits, temperature=0.8, seeds=seeds, step=4).tolist()
    other_seed = sample_next(logits, temperature=0.8, seeds=seeds + 100, step=3).tolist()
    assert other_step != batch or other_seed != batch


def test_sampler_errors():
    logits = torch.randn(4, 50)
    with pytest.raises(ValueError, match="temperature"):
        sample_next(logits, temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        sample_next(logits, temperature=1, top_p=0)
    with pytest.raises(ValueError, match=r"\[batch, vocab\]"):
        sample_next(logits[0], temperature=1)
    with pytest.raises(ValueError, match="one seed per row"):
        sample_next(logits, temperature=1)


def test_branch_seeds_are_seed_plus_index():
    assert branch_seeds(40, 3).tolist() == [40, 41, 42]
    fresh = branch_seeds(None, 2).tolist()
    assert fresh[1] == fresh[0] + 1
    assert fresh != branch_seeds(None, 2).tolist()  # a new random base each call


def test_missing_fast_kernels_are_named(monkeypatch):
    from inference import kernels

    monkeypatch.setattr(kernels, "available_kernels", lambda: {"fla": False, "causal_conv1d": True})
    message = kernels.missing_kernels_message()
    assert message is not None
    assert "flash-linear-attention" in message and "causal-conv1d" not in message
    assert "agentworld-studio[gpu]" in message
    monkeypatch.setattr(kernels, "available_kernels", lambda: {"fla": True, "causal_conv1d": True})
    assert kernels.missing_kernels_message() is None


# -- the tiny model -----------------------------------------------------------------------------


def test_tiny_model_is_a_real_hybrid_qwen3_5_moe(loaded, tiny_model_path):  # noqa: F811
    model, tok = loaded
    from transformers import Qwen3_5MoeForCausalLM

    assert isinstance(model, Qwen3_5MoeForCausalLM)
    assert model.config.model_type == "qwen3_5_moe_text"
    assert set(model.config.layer_types) == {"linear_attention", "full_attention"}
    assert model.config.num_experts > model.config.num_experts_per_tok > 1
    text = 'ünïcode 中文 <div class="x">&amp;</div> {"k": 1}\n\t$ ls'
    assert tok.decode(encode(tok, text)) == text
    chat = tok.apply_chat_template(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "A"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert chat == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tiny_model_build_is_deterministic(tmp_path, tiny_model_path):  # noqa: F811
    from safetensors.torch import load_file

    from inference.tiny import build_tiny_model

    again = build_tiny_model(tmp_path / "again")
    a = load_file(f"{tiny_model_path}/model.safetensors")
    b = load_file(f"{again}/model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "again/tokenizer.json").read_text() == open(
        f"{tiny_model_path}/tokenizer.json"
    ).read()


# -- the hf backend -----------------------------------------------------------------------------


def test_hf_backend_generates_with_chat_template_and_streams(loaded, tiny_model_path):  # noqa: F811
    from inference.backends import make_backend
    from inference.backends.hf import load_model
    from inference.prompts import build_messages, build_system_prompt
    from inference.types import GenerationRequest, SamplingParams, Turn

    model, tok = loaded
    messages = build_messages(
        build_system_prompt("terminal"), [Turn("ls", "a.txt")], Turn("cat a.txt"), "Read it"
    )
    backend = make_backend("hf", model=tiny_model_path)
    assert backend.is_neural and backend.name == "hf"
    events = []
    out = backend.generate(
        GenerationRequest(
            messages=messages, params=SamplingParams(n=2, temperature=0, max_tokens=16)
        ),
        on_event=lambda e: events.append(e) or False,
    )
    ids = tok(
        tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
        add_special_tokens=False,
    )["input_ids"]
    expected = tok.decode(reference(model, ids, 16, tok.eos_token_id), skip_special_tokens=True)
    assert [c.text for c in out] == [expected, expected]
    assert all(c.tokens_in == len(ids) and 0 < c.tokens_out <= 16 for c in out)
    assert all(c.prefill_s > 0 and c.decode_s > 0 for c in out)
    for sample in (0, 1):
        phases = [e.phase for e in events if e.sample == sample]
        assert phases[0] == "prefill" and phases[-1] == "done" and "decoding" in phases
    # loaded once per process
    assert load_model(tiny_model_path, "cpu") is load_model(tiny_model_path, "cpu")


def test_hf_backend_branches_and_stop(tiny_model_path):  # noqa: F811
    from inference.backends import make_backend
    from inference.types import GenerationRequest, SamplingParams

    backend = make_backend("hf", model=tiny_model_path)
    a = [{"role": "user", "content": "### Turn 1\n\n**Action:**\nls"}]
    b = [{"role": "user", "content": "### Turn 1\n\n**Action:**\npwd && whoami"}]
    out = backend.generate(
        GenerationRequest(branches=[a, b], params=SamplingParams(temperature=0, max_tokens=12)),
        on_event=lambda e: e.sample == 0 and e.tokens_out >= 1,
    )
    assert out[0].finish_reason == "cancelled" and out[0].tokens_out == 1
    assert out[1].finish_reason in ("length", "stop") and out[1].tokens_out >= 1


def test_hf_backend_bad_model_path_is_a_backend_error(tmp_path):
    from inference.backends import BackendError, make_backend
    from inference.types import GenerationRequest

    backend = make_backend("hf", model=str(tmp_path / "missing-model"))
    with pytest.raises(BackendError, match="cannot load model"):
        backend.generate(GenerationRequest(messages=[{"role": "user", "content": "x"}]))
