"""Behaviour search's plain-Python parts (`inference.behaviour`, `inference.embeddings`): the
judge's prompts and their bounds, the verdict parser on odd answers, the clustering of
reasons (deterministic, with TF-IDF or with embeddings), the cluster-naming prompt, and the
embeddings client against a real HTTP server (the scripted demo one)."""

from __future__ import annotations

import math

import pytest

from inference import behaviour as B
from inference.embeddings import Embedder, EmbeddingError, cosine
from studio.demo_data import scripted_models as S


def step(i: int, action: str = "ls", observation: str = "a b") -> B.StepText:
    return B.StepText(i, action, observation)


# ---- prompts ------------------------------------------------------------------------------


def test_the_step_prompt_holds_the_behaviour_the_task_the_recent_history_and_the_step():
    history = [step(i, f"cmd {i}", f"out {i}") for i in range(10)]
    messages = B.build_step_messages(
        "the agent   deletes\nfiles", step(10, "rm -rf /tmp/x", "removed"), history, "Clean up."
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"].startswith(B.STEP_SYSTEM_START)
    assert "<verdict>" in messages[0]["content"] and '"step"' not in messages[0]["content"]
    user = messages[1]["content"]
    assert user.startswith(f"{B.H_BEHAVIOUR}\nthe agent deletes files\n")  # one line
    assert f"{B.H_TASK}\nClean up." in user
    # the last HISTORY_STEPS earlier steps only, and it says so
    assert f"{B.H_HISTORY} (the last {B.HISTORY_STEPS} of 10, shortened)" in user
    assert "### Step 3\n" not in user and "### Step 4\nAction:\ncmd 4\nObservation:\nout 4" in user
    assert f"{B.H_ACTION} (step 10)\nrm -rf /tmp/x" in user
    assert user.endswith(f"{B.H_OBSERVATION}\nremoved")
    # `earlier` counts steps not passed in (the caller reads only the last few)
    few = B.build_step_messages("x", step(50), history[-3:], earlier=50)
    assert "(the last 3 of 50, shortened)" in few[1]["content"]
    # no history, no task: no empty sections
    bare = B.build_step_messages("x", step(0), [])[1]["content"]
    assert B.H_HISTORY not in bare and B.H_TASK not in bare


def test_long_texts_are_cut_in_the_middle_and_say_how_much():
    long_observation = "A" * 5000 + "MIDDLE" + "Z" * 5000
    user = B.build_step_messages("x", step(1, "ls", long_observation), [])[1]["content"]
    observation = user.split(B.H_OBSERVATION + "\n", 1)[1]
    assert len(observation) < B.STEP_OBSERVATION_CHARS + 100
    assert observation.startswith("AAAA") and observation.endswith("ZZZZ")
    assert "MIDDLE" not in observation
    cut = 10006 - B.STEP_OBSERVATION_CHARS
    assert f"[… {cut:,} characters cut …]" in observation
    long_history = [step(0, "x" * 5000, "y" * 5000)]
    user = B.build_step_messages("x", step(1), long_history)[1]["content"]
    assert len(user) < 2 * B.HISTORY_STEP_CHARS + 1000


def test_the_trajectory_prompt_keeps_the_first_and_last_steps_within_its_budget():
    steps = [step(i, f"action {i} " + "a" * 700, f"obs {i} " + "o" * 1100) for i in range(60)]
    messages = B.build_trajectory_messages("the agent deletes files", steps, "Task.")
    assert messages[0]["content"].startswith(B.TRAJECTORY_SYSTEM_START)
    assert '"step": the number of the first step' in messages[0]["content"]
    user = messages[1]["content"]
    assert f"{B.H_TRAJECTORY} (60 steps)" in user
    assert len(user) <= B.TRAJECTORY_CHARS + 2000
    assert "### Step 0\n" in user and "### Step 59\n" in user  # both ends
    shown = user.count("### Step ")
    assert f"[… {60 - shown} steps left out …]" in user
    # the steps shown are the only ones a verdict may name
    indexes = B.shown_step_indexes(steps)
    assert indexes == sorted(indexes) and len(indexes) == shown
    assert all(f"### Step {i}\n" in user for i in indexes)
    left_out = next(i for i in range(60) if i not in indexes)
    assert f"### Step {left_out}\n" not in user
    named = f'<verdict>{{"match": "yes", "step": {left_out}}}</verdict>'
    assert B.parse_verdict(named, step_indexes=indexes).step is None
    assert B.shown_step_indexes(steps[:3]) == [0, 1, 2]
    small = B.build_trajectory_messages("x", steps[:3])[1]["content"]
    assert small.count("### Step ") == 3 and "left out" not in small
    assert "(no steps)" in B.build_trajectory_messages("x", [])[1]["content"]


# ---- the verdict ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "match", "confidence", "reason"),
    [
        (
            '<verdict>{"match": "yes", "confidence": 0.8, "reason": "rm -rf"}</verdict>',
            True,
            0.8,
            "rm -rf",
        ),
        # thinking first, a code fence inside the tag, a capitalised No
        (
            '<think>{"match": "yes"}</think>\n<verdict>\n```json\n{"match": "No", "confidence": "0.25", "reason": "reads only"}\n```\n</verdict>',
            False,
            0.25,
            "reads only",
        ),
        # no tag: the last JSON object; booleans; a percentage
        (
            'I looked. {"match": true, "confidence": "85%", "reason": "deletes"}',
            True,
            0.85,
            "deletes",
        ),
        # near-JSON (single quotes, trailing comma), cut off before the tag closes
        (
            "<verdict>{'match': 'yes', 'confidence': 90, 'reason': 'wipes /tmp',",
            True,
            0.9,
            "wipes /tmp",
        ),
        # other words for it, no confidence that reads, a reason spread over lines
        (
            '<verdict>{"verdict": "Y", "confidence": "high", "explanation": "a\\n  b"}</verdict>',
            True,
            None,
            "a b",
        ),
        # above 1 and at most 10: 7 of 10, or 7%? neither is claimed
        ('<verdict>{"Match": 0, "Confidence": 1.7, "Reason": 3}</verdict>', False, None, "3"),
        ('<verdict>{"match": "no", "confidence": 8}</verdict>', False, None, ""),
        ('<verdict>{"match": "no", "confidence": "0.5%"}</verdict>', False, 0.005, ""),
        # a yes or no that goes on in words; another name for the field
        (
            '<verdict>{"match": "Yes, it runs rm -rf", "confidence": "0.6"}</verdict>',
            True,
            0.6,
            "",
        ),
        ('<verdict>{"is_match": "No.", "confidence": 1}</verdict>', False, 1.0, ""),
        ('<verdict>{"match": "yes", "confidence": -1, "reason": ""}</verdict>', True, None, ""),
        ('<verdict>{"match": "yes", "confidence": 250}</verdict>', True, None, ""),
    ],
)
def test_odd_answers_are_read(answer, match, confidence, reason):
    verdict = B.parse_verdict(answer)
    assert (verdict.match, verdict.confidence, verdict.reason) == (match, confidence, reason)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("I cannot tell.", "no <verdict> tag and no JSON object"),
        ('<verdict>{"confidence": 0.5}</verdict>', "has no 'match'"),
        ('<verdict>{"match": "maybe"}</verdict>', "match must be yes or no (got 'maybe')"),
        ('<verdict>{"match": "nothing shows it"}</verdict>', "match must be yes or no"),
        ('<verdict>{"match": "not really"}</verdict>', "match must be yes or no"),
        ("<verdict>[]</verdict>", "not a JSON object"),
        ("<verdict></verdict>", "not a JSON object"),
    ],
)
def test_answers_without_a_verdict_are_refused_saying_why(answer, says):
    with pytest.raises(B.VerdictError, match=None) as info:
        B.parse_verdict(answer)
    assert says in str(info.value)


def test_a_long_reason_is_cut_and_a_trajectorys_step_must_be_one_it_was_shown():
    reason = "word " * 200
    verdict = B.parse_verdict(f'<verdict>{{"match": "yes", "reason": "{reason}"}}</verdict>')
    assert len(verdict.reason) == B.REASON_CHARS and verdict.reason.endswith("…")
    shown = [0, 1, 2, 7]
    read = lambda text: B.parse_verdict(text, step_indexes=shown).step  # noqa: E731
    assert read('<verdict>{"match": "yes", "step": 7}</verdict>') == 7
    assert read('<verdict>{"match": "yes", "step": "step 2"}</verdict>') == 2
    assert read('<verdict>{"match": "yes", "step": 2.0}</verdict>') == 2
    assert read('<verdict>{"match": "yes", "step": 5}</verdict>') is None  # not shown
    assert read('<verdict>{"match": "yes", "step": null}</verdict>') is None
    assert read('<verdict>{"match": "no", "step": 1}</verdict>') is None  # no match, no step
    # the step unit ignores any step named
    assert B.parse_verdict('<verdict>{"match": "yes", "step": 1}</verdict>').step is None


# ---- clusters ---------------------------------------------------------------------------------


REASONS = [
    'the action runs "rm -rf /tmp/cache" and deletes the cache',
    "deletes the backup snapshots with restic forget --prune",
    'the action runs "rm -rf /var/log/old" and deletes the logs',
    "restic forget --prune deletes old backup snapshots",
    'rm -rf removes the build directory, "rm -rf build"',
    "the observation says 58 backup snapshots were removed by restic",
]


def test_reasons_are_grouped_by_their_words_the_same_way_every_time():
    groups = B.cluster_reasons(REASONS)
    assert sorted(i for g in groups for i in g) == list(range(len(REASONS)))
    together = {frozenset(g) for g in groups}
    rm = next(g for g in together if 0 in g)
    restic = next(g for g in together if 1 in g)
    assert {0, 2} <= rm and {1, 3} <= restic and not rm & restic
    assert B.cluster_reasons(list(REASONS)) == groups  # deterministic
    assert [len(g) for g in groups] == sorted((len(g) for g in groups), reverse=True)
    # at most max_clusters groups, whatever the distance
    assert len(B.cluster_reasons(REASONS, max_clusters=2, distance=0.01)) == 2
    assert B.cluster_reasons([]) == [] and B.cluster_reasons(["x"]) == [[0]]
    # nothing but stop words: one group
    assert B.cluster_reasons(["the", "and the", "of"]) == [[0, 1, 2]]


def test_reasons_are_grouped_by_embeddings_when_given():
    vectors = [[1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [0.1, 0.9], [0.0, 0.0]]
    groups = B.cluster_reasons(["a", "b", "c", "d", "e"], vectors)
    assert {frozenset(g) for g in groups} == {frozenset({0, 2}), frozenset({1, 3}), frozenset({4})}
    # all within the cut of one another, but of two clear kinds: split by the silhouette
    close = [[1.0, 0.10], [1.0, 0.11], [1.0, 0.10], [1.0, -0.10], [1.0, -0.11]]
    assert sorted(B.cluster_reasons(["r"] * 5, close)) == [[0, 1, 2], [3, 4]]
    # all alike: one group
    assert B.cluster_reasons(["r"] * 4, [[1.0, 0.0]] * 4) == [[0, 1, 2, 3]]


def test_a_cluster_is_named_by_the_judge_or_by_its_words():
    messages = B.build_naming_messages("the agent deletes files", [f"r{i}" for i in range(20)])
    assert messages[0]["content"].startswith(B.NAMING_SYSTEM_START)
    user = messages[1]["content"]
    assert f"{B.H_REASONS} (20)" in user and "- r11" in user and "- r12" not in user
    assert "(and 8 more)" in user
    assert (
        B.parse_cluster_name("<think>x</think><name> “Deletes backups.” </name>")
        == "“Deletes backups.”"
    )
    assert B.parse_cluster_name("The group:\n\n**removes caches**\n") == "removes caches"
    assert len(B.parse_cluster_name("<name>" + "w" * 200 + "</name>")) == B.CLUSTER_NAME_CHARS
    with pytest.raises(B.VerdictError):
        B.parse_cluster_name("<name> </name>")
    # counted once per reason, words of three letters or more, ties in alphabetical order
    assert B.top_words(REASONS[:3] + REASONS[4:5]) == ["deletes", "action", "runs"]


# ---- embeddings ------------------------------------------------------------------------------


def test_the_embeddings_client_batches_keeps_the_order_and_counts_tokens():
    with S.running() as url:
        embedder = Embedder(url, "scripted-embedding", batch_size=2)
        texts = ["rm -rf /tmp", "delete the files", "list the calendar", "", "rm -rf /tmp"]
        vectors = embedder.embed(texts)
        assert len(vectors) == 5 and {len(v) for v in vectors} == {256}
        assert vectors[0] == vectors[4] and embedder.tokens == 12  # the words of the texts
        # one synonym group, one dimension: closer in meaning than an unrelated text
        assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
        assert math.isclose(cosine(vectors[0], vectors[0]), 1.0, abs_tol=1e-6)
        with pytest.raises(EmbeddingError, match="scripted-judge.*did not answer.*404"):
            Embedder(url, "scripted-judge", max_retries=0).embed(["x"])
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0
    with pytest.raises(ValueError, match="2 and 3 numbers"):
        cosine([1, 2], [1, 2, 3])
