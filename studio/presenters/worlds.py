"""A world's files as a tree for the editor: folders from the paths, each file linked to its
row in the form."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TreeRow:
    depth: int
    name: str
    is_dir: bool
    anchor: str = ""  # the file's form row
    size: int = 0


def file_tree(files, prefix: str = "files") -> list[TreeRow]:
    """`files`: (row index, path, content) of the form's file rows. Folders first within a
    folder, then files, by name."""
    root: dict = {}
    for i, path, content in files:
        node = root
        parts = [p for p in path.strip("/").split("/") if p] or [path]
        for part in parts[:-1]:
            node = node.setdefault(part + "/", {})
        node[parts[-1]] = (f"{prefix}-{i}", len(content))
    rows: list[TreeRow] = []

    def walk(node: dict, depth: int) -> None:
        for name in sorted(node, key=lambda n: (not n.endswith("/"), n.lower())):
            value = node[name]
            if isinstance(value, dict):
                rows.append(TreeRow(depth, name, True))
                walk(value, depth + 1)
            else:
                rows.append(TreeRow(depth, name, False, value[0], value[1]))

    walk(root, 0)
    return rows
