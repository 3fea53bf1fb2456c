"""Exports train only what was reviewed, counted the way each trainer counts: a trajectory of
seven steps reviewed in a queue by two annotators (steps 0, 1, 4, 5 and 6 accepted, step 5 with
a correction; step 2 rejected by both; step 3 never reviewed; step 4 rejected by one and
adjudicated accept), a dataset version of the accepted ones, exported in every chat format.

- OpenAI fine-tuning: the trained messages are the assistant ones with `weight` 1.
- ms-swift: the assistant / tool_call messages with `loss` true.
- LLaMA-Factory: its supervised processor's rule, with `mask_history` (which the
  dataset_info.json entry names): only the last turn's response is labelled.
- TRL: SFTTrainer's own dataset preparation and data collator on the tiny tokenizer: the label
  tokens of each prompt-completion row.

For each: the trained turns are exactly the reviewed targets, never the rejected step."""

from __future__ import annotations

import json
import zipfile
from io import BytesIO

import pytest

from studio.exports.formats import EMPTY_THINK, ExportOptions, dataset_info_entry
from studio.models import Adjudication, QueueClaim, Step, StepAnnotation, Trajectory
from studio.services.datasets import (
    ExportCounts,
    SelectionData,
    create_version,
    rejected_steps,
    version_chunks,
)
from studio.services.queues import QueueData, create_queue
from tests.support.branching import make_trajectory

STEPS = [
    ("ls", "main.py  README.md"),
    ("python main.py", "ImportError: no module named yaml"),
    ("rm -rf /", "nothing happened"),  # rejected by both annotators
    ("pip install pyyaml", "Successfully installed pyyaml-6.0"),  # never reviewed
    ("python main.py", "ok"),  # one reject, adjudicated accept
    ("python -m pytest -q", "3 passed"),  # "needs fix" with a correction
    ("git status", "nothing to commit"),
]
FIX = "3 passed in 0.10s"
AGENT_SYSTEM = "You are a careful shell agent: one command per reply."
REVIEWED = [0, 1, 4, 5, 6]  # the steps of the version, in order
REJECTED = 2
WM_THINKING = "main.py imports yaml; it is not installed, so Python raises ImportError."


def predicted(observation: str) -> str:
    return f"<predicted_observation>\n{observation}\n</predicted_observation>"


def wm_target(index: int) -> str:
    return predicted(FIX if index == 5 else STEPS[index][1])


def agent_target(index: int) -> str:
    return STEPS[index][0]


@pytest.fixture
def reviewed(project):
    """The version made from the queue's accepted items."""
    traj, root = make_trajectory(project, steps=STEPS)
    Trajectory.objects.filter(pk=traj.pk).update(metadata={"agent_system_prompt": AGENT_SYSTEM})
    Step.objects.filter(branch=root, index=0).update(state="/home/user/project")
    Step.objects.filter(branch=root, index=1).update(
        observation_source="simulated", thinking=WM_THINKING
    )
    queue = create_queue(
        project, project.users["admin"], QueueData(name="review", annotators_per_item=2)
    )
    items = {i.step.index: i for i in queue.items.select_related("step")}
    people = [project.users["annotator"], project.users["researcher"]]
    plan = {
        0: ("accept", "accept"),
        1: ("accept", "accept"),
        2: ("reject", "reject"),
        4: ("accept", "reject"),
        5: ("needs_fix", "needs_fix"),
        6: ("accept", "accept"),
    }
    for index, verdicts in plan.items():
        for person, verdict in zip(people, verdicts, strict=True):
            StepAnnotation.objects.create(
                step=items[index].step,
                author=person,
                queue=queue,
                verdict=verdict,
                corrected_observation=FIX if index == 5 else "",
            )
            QueueClaim.objects.create(
                item=items[index],
                user=person,
                expires_at="2030-01-01T00:00Z",
                done_at="2026-01-01T00:00Z",
            )
    Adjudication.objects.create(item=items[4], adjudicator=project.users["admin"], verdict="accept")
    version = create_version(project, None, SelectionData(name="reviewed", queue=queue))
    steps = {s.index: s for s in root.all_steps()}
    return version, steps


def export(version, fmt: str, options: ExportOptions) -> tuple[list[dict], ExportCounts, bytes]:
    counts = ExportCounts()
    name, chunks = version_chunks(version, fmt, options, counts)
    data = b"".join(chunks)
    if name.endswith(".zip"):
        archive = zipfile.ZipFile(BytesIO(data))
        jsonl = next(n for n in archive.namelist() if n.endswith(".jsonl"))
        text = archive.read(jsonl)
    else:
        text = data
    return [json.loads(line) for line in text.decode().splitlines()], counts, data


def targets(turns: str) -> list[str]:
    return [wm_target(i) if turns == "wm" else agent_target(i) for i in REVIEWED]


@pytest.mark.django_db
def test_the_version_holds_the_accepted_steps_and_step_2_is_the_rejected_one(reviewed):
    version, steps = reviewed
    assert list(version.items.order_by("position").values_list("step__index", flat=True)) == (
        REVIEWED
    )
    # rejected: by both annotators (no adjudication); step 4's reject was overruled, step 3
    # was never reviewed
    assert rejected_steps(s.pk for s in steps.values()) == {steps[REJECTED].pk}


# -- OpenAI and ms-swift: the markers ---------------------------------------------------------


def agent_text(message: dict) -> str:
    """An agent message's action as text (a plain message's content; these are shell steps)."""
    return message["content"]


@pytest.mark.django_db
@pytest.mark.parametrize("turns", ["wm", "agent"])
def test_openai_weights_train_only_the_reviewed_targets(reviewed, turns):
    version, _ = reviewed
    rows, counts, _ = export(version, "openai", ExportOptions(turns=turns))
    assert counts.rows == len(REVIEWED) == len(rows)
    trained = []
    for row in rows:
        assistants = [m for m in row["messages"] if m["role"] == "assistant"]
        # OpenAI reads `weight` on assistant messages: every one says it, only the last is 1
        assert [m["weight"] for m in assistants] == [0] * (len(assistants) - 1) + [1]
        assert not any("weight" in m for m in row["messages"] if m["role"] != "assistant")
        trained += [m["content"] for m in assistants if m["weight"] == 1]
    assert trained == targets(turns)
    rejected = predicted(STEPS[REJECTED][1]) if turns == "wm" else STEPS[REJECTED][0]
    assert rejected not in trained
    # the rejected step is in later rows' context, untrained
    later = rows[REVIEWED.index(4)]["messages"]
    assert {"role": "assistant", "content": rejected, "weight": 0} in later


@pytest.mark.django_db
@pytest.mark.parametrize("turns", ["wm", "agent"])
def test_ms_swift_loss_marks_train_only_the_reviewed_targets(reviewed, turns):
    version, _ = reviewed
    rows, _, _ = export(version, "ms-swift", ExportOptions(turns=turns))
    trained = []
    for row in rows:
        answers = [m for m in row["messages"] if m["role"] in ("assistant", "tool_call")]
        assert [m["loss"] for m in answers] == [False] * (len(answers) - 1) + [True]
        assert not any(
            "loss" in m for m in row["messages"] if m["role"] not in ("assistant", "tool_call")
        )
        trained += [m["content"] for m in answers if m["loss"]]
    assert trained == targets(turns)


# -- LLaMA-Factory: its documented rule ---------------------------------------------------------


def llamafactory_pairs(row: dict, entry: dict) -> list[tuple[str, str]]:
    """A row as LLaMA-Factory's converters make it: (prompt, response) turn pairs in order
    (sharegpt: the conversation's odd/even turns; alpaca: `history`, then the instruction
    and output)."""
    columns = entry["columns"]
    if entry["formatting"] == "alpaca":
        pairs = [(q, a) for q, a in row[columns["history"]]]
        query = "\n".join(x for x in (row[columns["prompt"]], row[columns["query"]]) if x)
        return [*pairs, (query, row[columns["response"]])]
    tags = entry["tags"]
    turns = row[columns["messages"]]
    assert len(turns) % 2 == 0
    return [
        (turns[i][tags["content_tag"]], turns[i + 1][tags["content_tag"]])
        for i in range(0, len(turns), 2)
    ]


def llamafactory_trained(pairs: list[tuple[str, str]], *, mask_history: bool) -> list[str]:
    """The responses LLaMA-Factory's supervised processor labels: every turn's, or with
    `mask_history` the last turn's only (`train_on_prompt` off: no prompt is labelled)."""
    if mask_history:
        return [pairs[-1][1]]
    return [response for _, response in pairs]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fmt,style,turns",
    [
        ("llamafactory", "sharegpt", "wm"),
        ("llamafactory", "sharegpt", "agent"),
        ("llamafactory", "alpaca", "wm"),
        ("llamafactory", "alpaca", "agent"),
        ("sharegpt", "sharegpt", "wm"),
        ("sharegpt", "sharegpt", "agent"),
    ],
)
def test_llamafactory_with_mask_history_trains_only_the_reviewed_targets(
    reviewed, fmt, style, turns
):
    version, _ = reviewed
    options = ExportOptions(turns=turns, llamafactory_style=style)
    rows, _, data = export(version, fmt, options)
    entry = next(iter(dataset_info_entry("x", options, "x.jsonl").values()))
    if fmt == "llamafactory":
        info = json.loads(zipfile.ZipFile(BytesIO(data)).read("dataset_info.json"))
        entry = next(iter(info.values()))
    # the entry says how these rows train
    assert entry["mask_history"] is True
    trained = []
    untrained_history = []
    for row in rows:
        pairs = llamafactory_pairs(row, entry)
        trained += llamafactory_trained(pairs, mask_history=True)
        untrained_history += [a for _, a in pairs[:-1]]
    assert trained == targets(turns)
    # without mask_history LLaMA-Factory would train the history too, the rejected step's
    # answer among it: why the option is needed
    rejected = predicted(STEPS[REJECTED][1]) if turns == "wm" else STEPS[REJECTED][0]
    assert rejected not in trained and rejected in untrained_history


# -- TRL: its own tokenization and collator -----------------------------------------------------


@pytest.fixture(scope="module")
def trl_parts():
    from transformers import Qwen3_5MoeForCausalLM

    from inference.tiny import END_OF_TEXT, IM_END, _build_tokenizer, tiny_config

    tokenizer = _build_tokenizer()
    config = tiny_config(
        len(tokenizer),
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(END_OF_TEXT),
    )
    return tokenizer, Qwen3_5MoeForCausalLM(config)


def trl_trained_texts(rows: list[dict], trl_parts, tmp_path) -> list[str]:
    """The label tokens of each row as SFTTrainer prepares and collates them, decoded."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    tokenizer, model = trl_parts
    args = SFTConfig(output_dir=str(tmp_path), report_to="none", max_length=None, use_cpu=True)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    texts = []
    for example in trainer.train_dataset:
        batch = trainer.data_collator([example])
        labels = [int(t) for t in batch["labels"][0] if t != -100]
        texts.append(tokenizer.decode(labels))
    return texts


@pytest.mark.django_db
@pytest.mark.parametrize("fmt,turns", [("wm-turns", "wm"), ("agent-turns", "agent")])
def test_trl_trains_only_the_completion_the_reviewed_target(
    reviewed, fmt, turns, trl_parts, tmp_path
):
    version, _ = reviewed
    rows, _, _ = export(version, fmt, ExportOptions())
    for row in rows:
        row.pop("meta")  # provenance, not for the trainer
    trained = trl_trained_texts(rows, trl_parts, tmp_path)
    # the tiny chat template ends a turn with <|im_end|> and a newline, both trained
    assert trained == [t + "<|im_end|>\n" for t in targets(turns)]


# -- the rejected context, thinking, agent context ------------------------------------------


@pytest.mark.django_db
def test_rows_whose_context_holds_a_rejected_step_can_be_left_out_and_are_counted(
    reviewed, tmp_path
):
    import io

    from django.core.management import call_command

    version, _ = reviewed
    options = ExportOptions(drop_rejected_context=True)
    rows, counts, _ = export(version, "openai", options)
    # steps 4, 5 and 6 come after the rejected step 2
    assert counts.rejected_context == 3 and counts.rows == 2 and len(rows) == 2
    assert [r["messages"][-1]["content"] for r in rows] == [wm_target(0), wm_target(1)]
    name, _ = version_chunks(version, "openai", options, ExportCounts())
    assert name == "reviewed-v1-openai-wm-reviewed-context.jsonl"
    out = io.StringIO()
    call_command(
        "export_dataset", "reviewed", project="Test project", fmt="agent-turns",
        out=str(tmp_path / "a.jsonl"), drop_rejected_context=True, no_progress=True, stdout=out,
    )  # fmt: skip
    assert "wrote 2 rows" in out.getvalue()
    assert "3 rows whose context holds a rejected step" in out.getvalue()
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 2


@pytest.mark.django_db
def test_a_thinking_export_gives_every_target_a_think_block(reviewed):
    version, _ = reviewed
    rows, counts, _ = export(version, "openai", ExportOptions(thinking=True))
    answers = [r["messages"][-1]["content"] for r in rows]
    assert answers[1] == f"<think>\n{WM_THINKING}\n</think>\n\n{wm_target(1)}"
    assert [a for i, a in enumerate(answers) if i != 1] == [
        EMPTY_THINK + wm_target(i) for i in REVIEWED if i != 1
    ]
    assert counts.empty_thinking == 4
    # earlier turns answer in the same shape, without thinking
    history = [m["content"] for m in rows[-1]["messages"][:-1] if m["role"] == "assistant"]
    assert history == [wm_target(i) if i != 5 else predicted(FIX) for i in range(6)]


@pytest.mark.django_db
def test_agent_turns_start_from_the_trajectorys_system_prompt_and_initial_state(reviewed):
    version, _ = reviewed
    rows, _, _ = export(version, "agent-turns", ExportOptions())
    system, user = rows[0]["prompt"][:2]
    assert system == {"role": "system", "content": AGENT_SYSTEM}
    assert user["content"] == "Check the project.\n\n**Current State:**\n/home/user/project"


@pytest.mark.django_db
def test_the_export_page_says_what_trains_and_what_was_left_out(client, project, reviewed):
    from django.urls import reverse

    from studio.models import ExportJob, JobStatus

    version, _ = reviewed
    job = ExportJob.objects.create(
        version=version,
        format="openai",
        status=JobStatus.SUCCEEDED,
        rows=2,
        items_done=5,
        options={
            **ExportOptions(drop_rejected_context=True, thinking=True).__dict__,
            "left_out": {"rejected_context": 3, "empty_thinking": 1},
        },
    )
    client.force_login(project.users["annotator"])
    html = client.get(reverse("export_job", args=[job.pk])).content.decode()
    assert "3 rows whose context holds a rejected step, left out" in html
    assert "1 target without world-model thinking, written with an empty think block" in html
    assert "&quot;weight&quot;: 0" in html or '"weight": 0' in html
    detail = client.get(reverse("dataset_detail", args=[version.dataset_id])).content.decode()
    assert 'id="export-drop-rejected"' in detail and "mask_history: true" in detail
