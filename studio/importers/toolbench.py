"""ToolBench DFSDT answers.

`{win, tree: {tree: node}, answer_generation: {query, function: [schemas], final_answer,
finish_type, train_messages?}}`. Steps come from the last `train_messages` chain (assistant
`function_call` messages, each followed by the `function` message with the API result);
files without `train_messages` walk the search tree instead: the root-to-leaf path ending in
a `Finish` that gives an answer, else the longest path. Node types: `Thought` (the agent's
reasoning), `Action` (the function name), `Action Input` (the arguments, and the API result
in `observation`). The `Finish` call is the agent's answer, not an environment step: it goes
to `metadata["final_answer"]`. Tool schemas are `answer_generation.function`. A JSON list
(or JSONL) of answers is several trajectories.

The whole depth-first search is kept: every other root-to-leaf path of the tree becomes a
recorded branch forked where it leaves the paths already placed (named by how it ended:
answered, gave up, pruned or a dead end), so the branch tree shows what the agent explored.
"""

from __future__ import annotations

from studio.importers.base import (
    ParsedBranch,
    ParsedStep,
    ParsedTrajectory,
    Source,
    Where,
    as_text,
    content_text,
    get,
    optional_list,
    shorten,
    tool_call_action,
)

NAME = "toolbench"
DOMAIN = "mcp"
FINISH = "Finish"


def sniff(kind: str, sample) -> bool:
    sample = sample[0] if isinstance(sample, list) and sample else sample  # a list of answers
    return isinstance(sample, dict) and isinstance(sample.get("answer_generation"), dict)


def steps_from_messages(where: Where, messages: list) -> list[ParsedStep]:
    steps: list[ParsedStep] = []
    waiting: ParsedStep | None = None
    for i, msg in enumerate(messages):
        at = where.sub(f"[{i}]")
        role = get(msg, "role", str, at)
        if role == "assistant" and isinstance(msg.get("function_call"), dict):
            call = msg["function_call"]
            name = get(call, "name", str, at.sub(".function_call"))
            if name == FINISH:
                waiting = None
                continue
            waiting = ParsedStep(
                action=tool_call_action(name, call.get("arguments", "")),
                observation="",
                thinking=content_text(msg.get("content")).strip(),
                meta={"tool_name": name},
            )
            steps.append(waiting)
        elif role == "function" and waiting is not None:
            waiting.observation = content_text(msg.get("content"))
            waiting = None
    return steps


def _paths(node: dict, prefix: list[dict]):
    path = [*prefix, node]
    children = optional_list(node, "children")
    if not children:
        yield path
    for child in children:
        if isinstance(child, dict):
            yield from _paths(child, path)


def _answers(path: list[dict]) -> bool:
    names = [n.get("description") for n in path if n.get("node_type") == "Action"]
    return bool(names) and names[-1] == FINISH and "give_answer" in str(path[-1].get("description"))


def steps_from_tree(where: Where, root: dict) -> list[ParsedStep]:
    paths = list(_paths(root, []))
    chosen = next((p for p in paths if _answers(p)), None) or max(paths, key=len)
    return path_steps(chosen)


def path_steps(path: list[dict]) -> list[ParsedStep]:
    steps: list[ParsedStep] = []
    thought, name = "", None
    for node in path:
        kind, text = node.get("node_type"), as_text(node.get("description"))
        if kind == "Thought":
            thought = text
        elif kind == "Action":
            name = text
        elif kind == "Action Input" and name is not None:
            if name != FINISH:
                steps.append(
                    ParsedStep(
                        action=tool_call_action(name, text),
                        observation=as_text(node.get("observation")),
                        thinking=thought.strip(),
                        meta={"tool_name": name, "observation_code": node.get("observation_code")},
                    )
                )
            thought, name = "", None
    return steps


def _ending(path: list[dict]) -> str:
    last = path[-1]
    text = str(last.get("description") or "")
    if "give_answer" in text:
        return "answered"
    if "give_up" in text:
        return "gave up"
    if last.get("pruned"):
        return "pruned"
    return "dead end"


def _key(step: ParsedStep) -> tuple[str, str]:
    return step.action, step.observation


def explored_branches(root: dict, recorded: list[ParsedStep]) -> list[ParsedBranch]:
    """Every path of the search tree not already placed, as a branch forked where it leaves
    the placed ones (a trie of steps by action and observation: each node knows its branch)."""
    # trie node: (branch number, children by step key); branch 0 is the recorded one
    top: dict = {}

    def place(steps: list[ParsedStep], number: int, start: int, children: dict) -> None:
        for step in steps[start:]:
            child: tuple[int, dict] = (number, {})
            children[_key(step)] = child
            children = child[1]

    place(recorded, 0, 0, top)
    out: list[ParsedBranch] = []
    for path in _paths(root, []):
        steps = path_steps(path)
        children, owner, depth = top, 0, 0
        for step in steps:
            found = children.get(_key(step))
            if found is None:
                break
            owner, children, depth = found[0], found[1], depth + 1
        if depth == len(steps):
            continue  # nothing new: a path already placed (or a prefix of one)
        out.append(
            ParsedBranch(
                parent=owner,
                fork_index=depth,
                steps=steps[depth:],
                name=f"explored path {len(out) + 2} · {_ending(path)}",
            )
        )
        place(steps, len(out), depth, children)
    return out


def build(source: Source, where: Where, data: dict) -> ParsedTrajectory:
    answer = get(data, "answer_generation", dict, where)
    at = where.sub("answer_generation")
    query = as_text(answer.get("query")).strip()
    chains = answer.get("train_messages")
    tree_root = None
    if isinstance(data.get("tree"), dict) and isinstance(data["tree"].get("tree"), dict):
        tree_root = data["tree"]["tree"]
    if chains:
        if not isinstance(chains, list) or not isinstance(chains[-1], list):
            raise at.fail("train_messages", "must be a list of message lists")
        steps = steps_from_messages(at.sub(f".train_messages[{len(chains) - 1}]"), chains[-1])
    else:
        tree = get(data, "tree", dict, where)
        root = get(tree, "tree", dict, where.sub("tree"))
        steps = steps_from_tree(where.sub("tree.tree"), root)
    metadata = {k: answer[k] for k in ("final_answer", "finish_type", "query_count") if k in answer}
    if "win" in data:
        metadata["win"] = data["win"]
    stem = source.name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return ParsedTrajectory(
        title=f"{stem}: {shorten(query, 90)}" if stem else shorten(query, 100),
        task_instruction=query,
        tools=optional_list(answer, "function"),
        metadata=metadata,
        steps=steps,
        branches=explored_branches(tree_root, steps) if tree_root is not None else [],
        where=where,
    )


def parse(source: Source):
    for where, record in source.records():
        if not isinstance(record, dict):
            raise where.error("expected a JSON object (a ToolBench answer)")
        one = source.kind == "json" and not isinstance(source.data, list)
        yield build(source, Where(source.name) if one else where, record)
