"""The retrieval baseline, on recorded tau-bench tool calls (../shared/data) and small corpora."""

from __future__ import annotations

import json

import pytest

from inference.backends import BackendError, make_backend
from inference.backends.retrieval import MODEL_NAME, RetrievalBackend, query_of
from inference.parsing import WELL_FORMED, parse_prediction
from inference.prompts import build_messages, build_system_prompt
from inference.types import GenerationRequest, SamplingParams, Turn


def tau_bench_corpus(shared_data) -> list[tuple[str, str, str]]:
    """(domain, action, observation) of every tool call in the recorded tau-bench file."""
    data = json.loads((shared_data / "mcp/tau-bench/gpt-4o-airline.json").read_text())
    corpus = []
    for item in data:
        results = {m["tool_call_id"]: m["content"] for m in item["traj"] if m["role"] == "tool"}
        for m in item["traj"]:
            for call in m.get("tool_calls") or []:
                if call["id"] in results:
                    fn = call["function"]
                    action = json.dumps(
                        {"name": fn["name"], "arguments": json.loads(fn["arguments"])}
                    )
                    corpus.append(("mcp", action, results[call["id"]]))
    return corpus


def ask(action: str, history=()) -> list[dict]:
    return build_messages(build_system_prompt("mcp"), list(history), Turn(action=action), "task")


def test_answers_with_the_observation_of_the_most_similar_recorded_action(shared_data):
    corpus = tau_bench_corpus(shared_data)
    assert len(corpus) > 500
    backend = make_backend("retrieval", corpus=corpus)
    assert backend.is_neural is False and backend.model == MODEL_NAME
    assert "non-neural" in backend.model

    # A recorded action whose observation is unique in the corpus comes back exactly.
    domain, action, observation = next(
        s for s in corpus if sum(1 for t in corpus if t[1] == s[1]) == 1 and "reservation" in s[1]
    )
    out = backend.generate(GenerationRequest(messages=ask(action)))
    parsed = parse_prediction(out[0].text)
    assert parsed.status == WELL_FORMED
    assert parsed.observation == observation.strip()
    assert "non-neural" in parsed.thinking and action in parsed.thinking


def test_n_samples_are_the_top_n_distinct_observations():
    corpus = [
        ("terminal", "ls /tmp", "a.txt"),
        ("terminal", "ls /tmp", "a.txt"),  # duplicate observation: counted once
        ("terminal", "ls /tmp/x", "b.txt"),
        ("terminal", "cat notes", "hello"),
    ]
    backend = RetrievalBackend(corpus)
    out = backend.generate(GenerationRequest(messages=ask("ls /tmp"), params=SamplingParams(n=3)))
    observations = [parse_prediction(c.text).observation for c in out]
    assert observations == ["a.txt", "b.txt", "hello"]


def test_deterministic_given_the_seed_and_ties_depend_on_it():
    corpus = [("web", "click [1]", f"page {i}") for i in range(6)]  # all tie
    backend = RetrievalBackend(corpus)

    def first(seed):
        req = GenerationRequest(messages=ask("click [1]"), params=SamplingParams(seed=seed))
        return parse_prediction(backend.generate(req)[0].text).observation

    assert first(3) == first(3)
    assert len({first(s) for s in range(12)}) > 1


def test_branches_each_get_their_own_best_match():
    corpus = [("swe", "pytest tests", "3 passed"), ("swe", "git diff", "diff --git a/x b/x")]
    backend = RetrievalBackend(corpus)
    out = backend.generate(GenerationRequest(branches=[ask("git diff"), ask("run pytest tests")]))
    assert [parse_prediction(c.text).observation for c in out] == ["diff --git a/x b/x", "3 passed"]


def test_query_is_the_action_of_the_last_user_message():
    msgs = build_messages(
        "s", [Turn(action="first", observation="o")], Turn(action="second\nline", state="st"), "t"
    )
    assert query_of(msgs) == "second\nline"
    assert query_of([{"role": "user", "content": "free text"}]) == "free text"
    raw = "### Turn 2\n**Action:** open door\n**Current State:** hall"
    assert query_of([{"role": "user", "content": raw}]) == "open door"


def test_streaming_callback_gets_a_done_event():
    events = []
    RetrievalBackend([("os", "ls", "x")]).generate(
        GenerationRequest(messages=ask("ls")), on_event=lambda e: events.append(e) or False
    )
    assert [e.phase for e in events] == ["done"]


def test_domain_filter_and_empty_corpus_error():
    backend = RetrievalBackend([("web", "a", "b")], domain="android")
    with pytest.raises(BackendError, match="no recorded steps of domain 'android'"):
        backend.generate(GenerationRequest(messages=ask("a")))


def test_default_backend_is_retrieval_without_a_model():
    assert make_backend("", corpus=[("os", "a", "b")]).name == "retrieval"
