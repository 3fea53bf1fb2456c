"""Which models a project archive holds, how a model's rows are found from their project, and
the order they are written in (targets of foreign keys first).

Every model of the studio app (the many-to-many tables Django makes included) whose foreign
keys lead to Project is archived; a row belongs to the project its owner path leads to (the
shortest chain of non-null foreign keys, nullable ones only when there is no other). Foreign
keys to the user model are written as usernames (`codec`). A model that reaches no project
is named by `unarchived_models()`, and a test fails on it: add it to `EXCLUDED` with the
reason, or give it a foreign key."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from django.apps import apps
from django.conf import settings
from django.db import models

from studio.archive.embedded import EMBEDDED
from studio.archive.files import FILE_FIELDS

PROJECT = "studio.project"

# Studio models no archive holds, each with the reason.
EXCLUDED: dict[str, str] = {
    "studio.workerheartbeat": "which workers run now: a fact of this installation, not of a project",
    "studio.mcpsession": "an agent's open MCP connection: it ends with the server that held it",
    "studio.tokenratewindow": "a minute's count of an agent's requests: gone a minute later",
}

# A nullable owner path costs this much more than a non-null one: used only when no
# non-null path exists.
_NULLABLE_COST = 1000


@dataclass(frozen=True)
class Link:
    """A foreign key of an archived model."""

    attname: str  # the column's attribute, e.g. "branch_id"
    target: str  # the label of the model it points to, or "user"
    nullable: bool
    deferred: bool = False  # its target is written later (a cycle, or itself): fixed up after


@dataclass(frozen=True)
class Plan:
    """How one model is archived."""

    label: str  # "studio.step"
    model: type[models.Model]
    owner_path: str  # the filter from a row to its project: "branch__trajectory__project"
    fields: tuple[models.Field, ...]  # concrete fields, primary key first
    links: tuple[Link, ...]
    embedded: tuple[str, ...] = ()  # attnames of fields holding ids (`embedded.EMBEDDED`)
    deferred_embedded: tuple[str, ...] = ()  # those whose targets come later
    files: tuple[str, ...] = ()  # attnames of file paths the archive carries
    depends_on: tuple[str, ...] = field(default=())

    @property
    def deferred_links(self) -> tuple[Link, ...]:
        return tuple(link for link in self.links if link.deferred)

    def owner_filter(self, project_id: int) -> dict[str, int]:
        return {self.owner_path or "pk": project_id}


def label_of(model: type[models.Model]) -> str:
    return model._meta.label_lower


def _user_label() -> str:
    return settings.AUTH_USER_MODEL.lower()


def studio_models() -> list[type[models.Model]]:
    return list(apps.get_app_config("studio").get_models(include_auto_created=True))


def _foreign_keys(model: type[models.Model]) -> list[models.ForeignKey]:
    return [
        f
        for f in model._meta.concrete_fields
        if isinstance(f, models.ForeignKey)  # OneToOneField included
    ]


def _owner_paths() -> dict[str, tuple[int, list[str]]]:
    """label -> (cost, path of field names up to Project), by relaxation (a few models)."""
    by_label = {label_of(m): m for m in studio_models()}
    best: dict[str, tuple[int, list[str]]] = {PROJECT: (0, [])}
    changed = True
    while changed:
        changed = False
        for label, model in by_label.items():
            if label == PROJECT or label in EXCLUDED:
                continue
            for fk in _foreign_keys(model):
                target = label_of(fk.related_model)  # type: ignore[arg-type]
                if target == label or target not in best:
                    continue
                cost = best[target][0] + (_NULLABLE_COST if fk.null else 1)
                if label not in best or cost < best[label][0]:
                    best[label] = (cost, [fk.name, *best[target][1]])
                    changed = True
    return best


def unarchived_models() -> list[str]:
    """Studio models that no archive would hold (and that are not EXCLUDED)."""
    paths = _owner_paths()
    return sorted(
        label_of(m)
        for m in studio_models()
        if label_of(m) not in paths and label_of(m) not in EXCLUDED
    )


@cache
def plans() -> tuple[Plan, ...]:
    """The archived models in the order they are written and read back."""
    paths = _owner_paths()
    user = _user_label()
    by_label = {label_of(m): m for m in studio_models() if label_of(m) in paths}
    for model in by_label.values():
        for fk in _foreign_keys(model):
            target = label_of(fk.related_model)  # type: ignore[arg-type]
            if target != user and target not in by_label:
                raise LookupError(
                    f"{label_of(model)}.{fk.name} points to {target}, which no project archive "
                    "holds: archive that model too, or teach studio.archive about this key"
                )
    hard: dict[str, set[str]] = {}
    soft: dict[str, set[str]] = {}
    for label, model in by_label.items():
        hard[label], soft[label] = set(), set()
        for fk in _foreign_keys(model):
            target = label_of(fk.related_model)  # type: ignore[arg-type]
            if target in (user, label):
                continue
            (soft if fk.null else hard)[label].add(target)
        for (owner, _attname), spec in EMBEDDED.items():
            if owner == label:
                soft[label].update(t for t in spec.targets if t != label)
    order = _dependency_order(hard, soft)
    placed: dict[str, int] = {label: i for i, label in enumerate(order)}
    result = []
    for label in order:
        model = by_label[label]
        pk = model._meta.pk
        assert pk is not None
        fields = (pk, *(f for f in model._meta.concrete_fields if f is not pk))
        links = []
        for fk in _foreign_keys(model):
            target = label_of(fk.related_model)  # type: ignore[arg-type]
            if target == user:
                links.append(Link(fk.attname, "user", fk.null))
                continue
            deferred = placed[target] >= placed[label]
            if deferred and not fk.null:
                raise LookupError(
                    f"{label}.{fk.name} is a non-null foreign key in a cycle: a project archive "
                    "cannot write it"
                )
            links.append(Link(fk.attname, target, fk.null, deferred))
        embedded = tuple(attname for (owner, attname) in EMBEDDED if owner == label)
        late = tuple(
            attname
            for attname in embedded
            if any(placed.get(t, -1) >= placed[label] for t in EMBEDDED[(label, attname)].targets)
        )
        result.append(
            Plan(
                label=label,
                model=model,
                owner_path="__".join(paths[label][1]),
                fields=fields,
                links=tuple(links),
                embedded=embedded,
                deferred_embedded=late,
                files=tuple(attname for (owner, attname) in FILE_FIELDS if owner == label),
                depends_on=tuple(sorted(hard[label] | soft[label])),
            )
        )
    return tuple(result)


def _dependency_order(hard: dict[str, set[str]], soft: dict[str, set[str]]) -> list[str]:
    """Targets before the rows that point to them. Models in a cycle of keys (strongly
    connected components) are ordered by their non-null keys; each nullable key or embedded
    id into the cycle that points forward is then fixed up after the rows are written.
    Deterministic: ties by label."""
    every = {m: hard[m] | soft[m] for m in hard}
    components = _components(every)
    component_of = {m: i for i, members in enumerate(components) for m in members}
    order: list[str] = []
    done: set[int] = set()
    left = set(range(len(components)))
    while left:
        # a component whose keys out of it all point to components already placed
        ready = sorted(
            (
                i
                for i in left
                if all(
                    component_of[t] in done
                    for m in components[i]
                    for t in every[m]
                    if component_of[t] != i
                )
            ),
            key=lambda i: min(components[i]),
        )
        for i in ready:
            order += _order_within(components[i], hard, soft)
            done.add(i)
            left.discard(i)
    return order


def _order_within(
    members: set[str], hard: dict[str, set[str]], soft: dict[str, set[str]]
) -> list[str]:
    order: list[str] = []
    left = set(members)
    while left:
        ready = [m for m in left if not (hard[m] & left)]
        if not ready:
            raise LookupError(f"non-null foreign keys form a cycle among {sorted(left)}")
        first = min(ready, key=lambda m: (len(soft[m] & left), m))
        order.append(first)
        left.discard(first)
    return order


def _components(edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components (a handful of models: recursion is fine)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for t in sorted(edges[m]):
            if t not in index:
                visit(t)
                low[m] = min(low[m], low[t])
            elif t in on_stack:
                low[m] = min(low[m], index[t])
        if low[m] == index[m]:
            members = set()
            while True:
                t = stack.pop()
                on_stack.discard(t)
                members.add(t)
                if t == m:
                    break
            found.append(members)

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return found


def plan_of(label: str) -> Plan:
    for plan in plans():
        if plan.label == label:
            return plan
    raise KeyError(label)
