"""Perturbations in plain Python: validation with messages naming the field, specs, the
deterministic transforms, seeded rules, and the runner applying them (in-process)."""

from __future__ import annotations

import json

import pytest

from inference import perturbations as P
from inference.simulation.request import InvalidRequest
from inference.simulation.runner import run_simulation
from inference.simulation.sink import MemorySink
from tests.support.fake_backends import ScriptedBackend
from tests.test_simulation_runner import request, world


def test_every_preset_is_a_valid_perturbation_and_every_domain_has_some():
    assert set(P.PRESETS) == {"mcp", "search", "terminal", "swe", "android", "web", "os"}
    for domain, presets in P.PRESETS.items():
        assert presets, domain
        for preset in presets:
            built = P.build(preset.kind, preset.params, preset.mode, preset.name)
            assert built.kind == preset.kind


@pytest.mark.parametrize(
    ("kind", "params", "mode", "message"),
    [
        ("explode", {}, "deterministic", "kind must be one of tool_error"),
        ("truncated", {"chars": "many"}, "deterministic", "truncated.chars must be a whole number"),
        ("truncated", {"chars": -1}, "deterministic", "truncated.chars must be 0 to"),
        ("truncated", {"lines": 3}, "deterministic", "truncated has no parameter 'lines'"),
        ("custom", {"instruction": "x"}, "deterministic", "no deterministic form"),
        ("custom", {"instruction": "  "}, "prompted", "custom.instruction: write"),
        ("timeout", {}, "loud", "mode must be prompted or deterministic"),
    ],
)
def test_bad_perturbations_are_refused_naming_the_field(kind, params, mode, message):
    with pytest.raises(P.PerturbationError, match=message):
        P.build(kind, params, mode, where="perturbations[0]")


def test_specs_parse_with_defaults_and_round_trip():
    p = P.parse_spec("truncated:chars=40")
    assert (p.kind, p.params, p.mode) == ("truncated", {"chars": 40}, "deterministic")
    assert P.spec_of(p) == "truncated:chars=40"
    assert P.spec_of(P.parse_spec("empty_result")) == "empty_result"
    custom = P.parse_spec("custom:instruction=the disk is read-only")
    assert custom.mode == "prompted"
    with pytest.raises(P.PerturbationError, match="'chars40' is not param=value"):
        P.parse_spec("truncated:chars40")
    with pytest.raises(P.PerturbationError, match="unknown kind 'nope'"):
        P.parse_spec("nope:x=1")


def test_truncation_keeps_at_most_the_characters_plus_a_marker():
    p = P.parse_spec("truncated:chars=10")
    out = P.transform(p, "0123456789abcdefghij", "terminal")
    assert out == "0123456789" + P.TRUNCATION_MARKER
    assert P.transform(p, "short", "terminal") == "short"  # nothing to cut


def test_json_transforms_keep_the_document_shape():
    obs = json.dumps({"results": [{"id": 1, "title": "a"}], "total": 1})
    drift = P.build("schema_drift", {"field": "id", "rename_to": "identifier"})
    assert json.loads(P.transform(drift, obs, "mcp"))["results"] == [
        {"identifier": 1, "title": "a"}
    ]
    missing = P.build("schema_drift", {"field": "title"})
    assert json.loads(P.transform(missing, obs, "mcp"))["results"] == [{"id": 1}]
    empty = P.transform(P.build("empty_result"), obs, "mcp")
    assert json.loads(empty) == {"results": [], "total": 0}  # the count goes with the list
    pretty = json.dumps({"labels": [{"name": "bug"}]}, indent=2)  # no "id" anywhere
    assert P.transform(drift, pretty, "mcp") == pretty  # not re-serialised: no change at all
    broken = P.transform(P.build("malformed_json"), obs, "mcp")
    with pytest.raises(ValueError):
        json.loads(broken)


def test_errors_read_as_the_domain_writes_them():
    err = P.build("tool_error", {"message": "quota exceeded", "code": 429})
    mcp = json.loads(P.transform(err, "{}", "mcp"))
    assert mcp == {"isError": True, "error": {"code": 429, "message": "quota exceeded"}}
    assert P.transform(err, "x", "terminal") == "quota exceeded\n[exit code 429]"
    assert "Permission denied" in P.transform(P.build("permission_denied"), "", "terminal")
    assert P.transform(P.build("empty_result"), "10 results", "search") == "No results found."


def test_rules_match_steps_and_tools_and_draw_reproducibly():
    rule = P.build_rule(
        {"kind": "timeout", "first_step": 3, "last_step": 5, "tool": "search", "probability": 0.5},
        "perturbations[0]",
    )
    assert rule.where() == "steps 3-5 · tool search · p=0.5"
    assert not rule.matches(2, "search[q]") and not rule.matches(4, "open_page[x]")
    assert rule.matches(4, "search[q]")
    assert P.action_tool('{"name": "get_weather", "arguments": {}}') == "get_weather"
    assert P.action_tool("ls -la") == "ls"
    draws = [
        P.choose([rule], seed=7, sample=s, index=4, action="search[q]") is not None
        for s in range(200)
    ]
    again = [
        P.choose([rule], seed=7, sample=s, index=4, action="search[q]") is not None
        for s in range(200)
    ]
    assert draws == again  # reproducible
    assert 60 < sum(draws) < 140  # about half
    with pytest.raises(P.PerturbationError, match=r"perturbations\[0\]: last_step 1 is before"):
        P.build_rule({"kind": "timeout", "first_step": 3, "last_step": 1}, "perturbations[0]")
    with pytest.raises(P.PerturbationError, match=r"perturbations\[1\]\.probability must be"):
        P.build_rules([{"kind": "timeout"}, {"kind": "timeout", "probability": 2}])


def test_the_request_refuses_prompted_perturbations_on_the_baseline():
    with pytest.raises(InvalidRequest) as info:
        request(
            2,
            "ls",
            perturbations=[
                {
                    "kind": "custom",
                    "mode": "prompted",
                    "params": {"instruction": "the disk is full"},
                }
            ],
        )
    assert "cannot follow a prompted perturbation" in info.value.errors["perturbations"][0]
    with pytest.raises(InvalidRequest) as info:
        request(2, "ls", perturbations=[{"kind": "truncated", "params": {"chars": "x"}}])
    assert info.value.errors["perturbations"] == [
        "perturbations[0]: truncated.chars must be a whole number, got 'x'"
    ]


def test_a_deterministic_truncation_applies_to_every_future_and_is_recorded():
    sink = MemorySink()
    req = request(
        2, "python3 -V", n=3, perturbations=[{"kind": "truncated", "params": {"chars": 5}}]
    )
    outcome = run_simulation(req, world(2), ScriptedBackend(), sink)
    assert outcome.status == "succeeded", outcome.error
    for sample, (step,) in sink.steps.items():
        assert step.observation == "ran p" + P.TRUNCATION_MARKER
        assert step.observation_source == "perturbed"
        assert step.meta["unperturbed_observation"] == f"ran python3 -V #{sample}"
        assert step.meta["perturbation"]["kind"] == "truncated"
        assert step.meta["perturbation"]["changed"] is True


def test_a_replacing_perturbation_needs_no_model_call():
    backend = ScriptedBackend()
    sink = MemorySink()
    req = request(
        2, "python3 -V", n=2, perturbations=[{"kind": "timeout", "params": {"seconds": 9}}]
    )
    outcome = run_simulation(req, world(2), backend, sink)
    assert outcome.status == "succeeded", outcome.error
    assert backend.requests == []
    for _, (step,) in sink.steps.items():
        assert step.observation.startswith("timeout: the command did not finish within 9 s")
        assert step.meta["model_call"] is False and step.raw_output == ""
    assert sink.finished == {0: ("succeeded", ""), 1: ("succeeded", "")}
    assert outcome.totals.progress == 1.0


def test_prompted_perturbations_reach_the_model_for_their_turn_only():
    backend = ScriptedBackend()
    sink = MemorySink()
    rules = [
        {
            "kind": "tool_error",
            "mode": "prompted",
            "first_step": 2,
            "last_step": 2,
            "params": {"message": "disk full", "code": 28},
        }
    ]
    req = request(
        2,
        None,
        mode="replay",
        backend="openai",
        model="m",
        base_url="http://127.0.0.1:9/v1",
        perturbations=rules,
    )
    outcome = run_simulation(req, world(2), backend, sink)
    assert outcome.status == "succeeded", outcome.error
    prompts = [r.messages[-1]["content"] for r in backend.requests]
    assert "error code 28" in prompts[0] and "'disk full'" in prompts[0]
    assert "Simulation note" not in prompts[1]
    # the next turn's history holds step 2's plain prompt, not the note
    asked = [m["content"] for m in backend.requests[1].messages if m["role"] == "user"]
    assert asked and all("Simulation note" not in text for text in asked)
    steps = {s.index: s for s in sink.steps[0]}
    assert steps[2].observation_source == "perturbed"
    assert steps[2].meta["perturbation"]["mode"] == "prompted"
    assert steps[3].observation_source == "simulated"
    assert "perturbation" not in steps[3].meta


def test_schema_drift_that_finds_no_field_is_not_called_perturbed():
    sink = MemorySink()
    rules = [{"kind": "schema_drift", "params": {"field": "id"}}]
    outcome = run_simulation(
        request(2, "ls", perturbations=rules), world(2), ScriptedBackend(), sink
    )
    assert outcome.status == "succeeded", outcome.error
    (step,) = sink.steps[0]
    assert step.observation_source == "simulated"
    assert step.meta["perturbation"]["changed"] is False


def test_a_sweep_gives_each_perturbation_its_own_futures():
    backend = ScriptedBackend()
    sink = MemorySink()
    sweep = [
        {"kind": "truncated", "params": {"chars": 3}, "name": "Cut"},
        {"kind": "empty_result", "name": "Empty"},
        {"kind": "timeout", "name": "Slow"},
    ]
    req = request(2, "python3 -V", n=2, sweep=sweep)
    assert req.n == 6 and req.samples_per_perturbation == 2
    outcome = run_simulation(req, world(2), backend, sink)
    assert outcome.status == "succeeded", outcome.error
    labels = {s: steps[0].meta["perturbation"]["label"] for s, steps in sink.steps.items()}
    assert labels == {0: "Cut", 1: "Cut", 2: "Empty", 3: "Empty", 4: "Slow", 5: "Slow"}
    assert sink.steps[0][0].observation == "ran" + P.TRUNCATION_MARKER
    assert sink.steps[2][0].observation == ""  # a shell that finds nothing prints nothing
    assert sink.steps[4][0].observation.startswith("timeout:")
    # one call for the entries that needed the model, sampled once per sample number (the
    # timeouts needed none): every column perturbs the same base observations
    (sent,) = backend.requests
    assert sent.params.n == 2
    for sample in (0, 1):
        base = f"ran python3 -V #{sample}"
        assert sink.steps[sample][0].meta["unperturbed_observation"] == base
        assert sink.steps[sample + 2][0].meta["unperturbed_observation"] == base
    with pytest.raises(InvalidRequest) as info:
        request(2, "ls", n=40, sweep=sweep)
    assert "3 x 40 = 120 futures, more than 64" in info.value.errors["n"][0]
    with pytest.raises(InvalidRequest) as info:
        request(2, "ls", sweep=[sweep[0], sweep[0]])
    assert "must differ" in info.value.errors["sweep"][0]


# ---- "Empty result" in each domain's own form ---------------------------------------------

EMPTY = P.build("empty_result")


@pytest.mark.parametrize(
    ("domain", "observation", "expected"),
    [
        # MCP: the tool's document keeps its metadata with its lists emptied; a result with
        # no list is an MCP tool result with an empty content array
        ("mcp", '{"date": "2026-03-12", "timezone": "Europe/Berlin", "events": [{"id": 1}]}',
         {"date": "2026-03-12", "timezone": "Europe/Berlin", "events": []}),
        ("mcp", '[{"id": 1}, {"id": 2}]', []),
        ("mcp", '{"temp_c": 9}', {"content": [], "isError": False}),
        # one record fetched by its id: nothing found is no record, not one with no attendees
        ("mcp", '{"id": "ev-7", "title": "Standup", "attendees": [{"name": "Ana"}]}',
         {"content": [], "isError": False}),
        ("mcp", "a text answer", {"content": [], "isError": False}),
        # search: a result page of the query with no results
        ("search", '{"query": "python 3.12", "results": [{"title": "t"}], "total": 1}',
         {"query": "python 3.12", "results": [], "total": 0}),
        # android: the same screen with no UI elements
        ("android", '{"package": "com.x", "activity": ".Main", "ui_elements": [{"text": "a"}]}',
         {"package": "com.x", "activity": ".Main", "ui_elements": []}),
    ],
)  # fmt: skip
def test_an_empty_json_result_keeps_the_domains_form(domain, observation, expected):
    assert json.loads(P.transform(EMPTY, observation, domain)) == expected


def test_an_empty_text_result_reads_as_the_domain_writes_it():
    assert P.transform(EMPTY, "app.py\nstatic", "terminal") == ""  # empty stdout
    assert P.transform(EMPTY, "src/a.py", "swe") == (
        "Your command ran successfully and did not produce any output."
    )  # SWE-agent's words for it
    assert P.transform(EMPTY, "Title: What's New\nURL: x", "search") == "No results found."
    tree = '[1] RootWebArea "Orders · Shop" [focused]\n  [2] banner\n    [3] link "Shop"'
    assert P.transform(EMPTY, tree, "web") == (
        '[1] RootWebArea "Orders · Shop" [focused]\n  [2] main\n    [3] StaticText "No results found."'
    )
    page = "<!DOCTYPE html><html><head><title>Orders</title></head><body class=x><ul><li>a</li></ul></body></html>"
    emptied = P.transform(EMPTY, page, "web")
    assert emptied.startswith(
        "<!DOCTYPE html><html><head><title>Orders</title></head><body class=x>"
    )
    assert "<li>" not in emptied and "No results found." in emptied
    screen = "[Top bar] Activities · Wed\n[Window] Files — Home (focused)\n  Items: a.txt · b.txt"
    assert P.transform(EMPTY, screen, "os") == (
        "[Top bar] Activities · Wed\n[Window] Files — Home (focused)\n  (no items)"
    )


# ---- does a prompted perturbation's answer show it? ---------------------------------------


@pytest.mark.parametrize(
    ("kind", "params", "observation", "expected"),
    [
        ("empty_result", {}, '{"query": "q", "results": [], "meta": {"page": 1}}', P.SHOWN),
        ("empty_result", {}, "[]", P.SHOWN),
        ("empty_result", {}, "No results found for q.", P.SHOWN),
        ("empty_result", {}, "", P.SHOWN),
        ("empty_result", {}, '{"results": [{"title": "Python 3.12"}]}', P.NOT_SHOWN),
        ("empty_result", {}, "app.py\nstatic", P.NOT_SHOWN),
        ("tool_error", {"code": 503, "message": "down"}, '{"isError": true, "error": {}}', P.SHOWN),
        ("tool_error", {"code": 503, "message": "down"}, "HTTP 503 Service Unavailable", P.SHOWN),
        ("tool_error", {"code": 503, "message": "down"}, '{"error": "", "response": "ok"}',
         P.NOT_SHOWN),
        ("tool_error", {"code": 503, "message": "down"}, "app.py", P.NOT_SHOWN),
        ("timeout", {"seconds": 30}, "Request timed out after 30 s", P.SHOWN),
        ("timeout", {"seconds": 30}, "total 4", P.NOT_SHOWN),
        ("rate_limit", {"retry_after": 60}, "429 Too Many Requests", P.SHOWN),
        ("rate_limit", {"retry_after": 60}, "ok", P.NOT_SHOWN),
        ("permission_denied", {"resource": ""}, "cat: /etc/shadow: Permission denied", P.SHOWN),
        ("permission_denied", {"resource": ""}, "root:x:0:0", P.NOT_SHOWN),
        ("network_failure", {"detail": "x"}, "curl: (7) Connection refused", P.SHOWN),
        ("network_failure", {"detail": "x"}, "<html>ok</html>", P.NOT_SHOWN),
        ("truncated", {"chars": 10}, "0123456789…", P.SHOWN),
        ("truncated", {"chars": 10}, "x" * 200, P.NOT_SHOWN),
        ("schema_drift", {"field": "id", "rename_to": "uid"}, '{"uid": 1}', P.SHOWN),
        ("schema_drift", {"field": "id", "rename_to": "uid"}, '{"id": 1}', P.NOT_SHOWN),
        ("schema_drift", {"field": "id", "rename_to": ""}, '{"name": "a"}', P.SHOWN),
        ("schema_drift", {"field": "id", "rename_to": ""}, "not json", P.UNCHECKED),
        ("malformed_json", {}, '{"a": 1', P.SHOWN),
        ("malformed_json", {}, '{"a": 1}', P.NOT_SHOWN),
        ("stale", {"age": "3 days"}, "anything", P.UNCHECKED),
        ("custom", {"instruction": "x"}, "anything", P.UNCHECKED),
    ],
)  # fmt: skip
def test_a_prompted_perturbation_is_checked_by_its_form(kind, params, observation, expected):
    assert P.check_shown(kind, observation, params) == expected


@pytest.mark.django_db
def test_the_badge_of_a_prompted_perturbation_says_whether_it_shows():
    from studio.models import Step
    from studio.templatetags.ui_tags import provenance_badge

    meta = {"perturbation": {"kind": "empty_result", "params": {}, "mode": "prompted",
                             "label": "Empty result", "changed": True}}  # fmt: skip
    shown = Step(provenance="edited", observation_source="perturbed", observation="[]", meta=meta)
    assert "asked · shown (checked)" in provenance_badge(shown)
    missed = Step(
        provenance="edited", observation_source="perturbed", observation="a.py", meta=meta
    )
    assert "asked · not shown (checked)" in provenance_badge(missed)
    meta["perturbation"] = {**meta["perturbation"], "kind": "stale", "params": {"age": "1 d"}}
    stale = Step(provenance="edited", observation_source="perturbed", observation="x", meta=meta)
    assert "asked · unchecked" in provenance_badge(stale)
    meta["perturbation"] = {**meta["perturbation"], "kind": "empty_result", "mode": "deterministic"}
    written = Step(provenance="edited", observation_source="perturbed", observation="", meta=meta)
    assert "asked" not in provenance_badge(written)  # written by the transform: nothing to check
