"""The studio's own format, `agentworld-studio/v1`: exactly what the studio stores.

`{"format": "agentworld-studio/v1", "trajectories": [{"title", "domain", "task_instruction",
"system_prompt", "tools": [], "tags": [], "metadata": {}, "steps": [{"action",
"observation", "state"?, "thinking"?, "raw_prompt"?, "meta"?}]}]}`. A trajectory without
`domain` takes it from a domain-named folder in the path, else mcp.
"""

from __future__ import annotations

from studio.importers.base import DOMAINS, ParsedStep, ParsedTrajectory, Source, Where, get

NAME = "agentworld-studio/v1"
DOMAIN = "mcp"
# Generic format: a domain-named folder in the path (…/web/…) decides, else DOMAIN.
PATH_DECIDES_DOMAIN = True


def sniff(kind: str, sample) -> bool:
    return isinstance(sample, dict) and sample.get("format") == NAME


def read_step(where: Where, raw) -> ParsedStep:
    if not isinstance(raw, dict):
        raise where.error("a step must be a JSON object")
    return ParsedStep(
        action=get(raw, "action", str, where),
        observation=get(raw, "observation", str, where),
        state=get(raw, "state", str, where, required=False) or "",
        thinking=get(raw, "thinking", str, where, required=False) or "",
        raw_prompt=get(raw, "raw_prompt", str, where, required=False) or "",
        meta=get(raw, "meta", dict, where, required=False) or {},
    )


def read_trajectory(where: Where, raw) -> ParsedTrajectory:
    if not isinstance(raw, dict):
        raise where.error("a trajectory must be a JSON object")
    domain = get(raw, "domain", str, where, required=False)
    if domain is not None and domain not in DOMAINS:
        raise where.fail("domain", f"must be one of {', '.join(DOMAINS)}")
    tags = get(raw, "tags", list, where, required=False) or []
    if not all(isinstance(t, str) and t.strip() for t in tags):
        raise where.fail("tags", "must be a list of non-empty strings")
    steps = get(raw, "steps", list, where)
    return ParsedTrajectory(
        title=get(raw, "title", str, where),
        task_instruction=get(raw, "task_instruction", str, where, required=False) or "",
        system_prompt=get(raw, "system_prompt", str, where, required=False) or "",
        tools=get(raw, "tools", list, where, required=False) or [],
        metadata=get(raw, "metadata", dict, where, required=False) or {},
        tags=[t.strip() for t in tags],
        steps=[read_step(where.sub(f".steps[{i}]"), s) for i, s in enumerate(steps)],
        domain=domain,
        where=where,
    )


def parse(source: Source):
    where = Where(source.name)
    data = source.data
    if source.kind != "json" or not isinstance(data, dict):
        raise where.error(f'expected one JSON object with "format": "{NAME}"')
    if data.get("format") != NAME:
        raise where.fail("format", f'must be "{NAME}"')
    items = get(data, "trajectories", list, where)
    for i, raw in enumerate(items):
        yield read_trajectory(where.sub(f"trajectories[{i}]"), raw)
        source.report((i + 1) / len(items))
