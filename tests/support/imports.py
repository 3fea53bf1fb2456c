"""Uploads for the import tests: a small native file and the htmx upload request."""

from __future__ import annotations

import json

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

HX = {"HTTP_HX_REQUEST": "true"}


def native_file(n_trajectories: int = 2, steps: int = 3) -> bytes:
    data = {
        "format": "agentworld-studio/v1",
        "trajectories": [
            {
                "title": f"Orchard inventory {t}",
                "domain": "terminal",
                "task_instruction": "Count the pear crates in the depot.",
                "steps": [
                    {"action": f"wc -l crates-{t}-{i}.csv", "observation": f"{10 * i + t} crates"}
                    for i in range(steps)
                ],
            }
            for t in range(n_trajectories)
        ],
    }
    return json.dumps(data).encode()


def upload(client, project, content: bytes, name: str = "orchard.json", **extra):
    url = reverse("import_upload", kwargs={"project_id": project.pk})
    return client.post(url, {"file": SimpleUploadedFile(name, content), **extra}, **HX)
