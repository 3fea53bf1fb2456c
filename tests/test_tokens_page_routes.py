"""The API tokens page tells an agent's author where to connect: every route the episode API
serves for a world (OpenEnv's, the validator's and MCP's) is named there, and the reset's
fields, so a new route never goes unmentioned on the page a new user reads first."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from inference.worlds import parse_world
from studio.services.worlds import save_world
from studio.serving import episodes as serving
from tests.support.episode_api import WEATHER


def _suffixes() -> list[str]:
    """The routes of one world's base, as the page names them (`/reset`, `/ws`, ...)."""
    return [route.path for route in serving._routes("")]


@pytest.mark.django_db
def test_the_tokens_page_names_every_route_of_a_world(client, project):
    save_world(project, parse_world(WEATHER))
    client.force_login(project.users["admin"])
    page = client.get(reverse("token_list", args=[project.pk])).content.decode()
    section = page.split('id="episode-endpoints"')[1].split("</section>")[0]
    named = set(re.findall(r"<code>(?:GET |POST |WebSocket )?(/[a-z_.]+)</code>", section))
    missing = [s for s in _suffixes() if s not in named]
    assert not missing, f"the tokens page does not name {missing}"
    for field in ("task_id", "task", "seed", "max_steps"):  # the reset's fields
        assert f"<code>{field}</code>" in section
    assert "MCPToolClient" in section and "openenv validate --url" in section
    assert "/mcp/t/&lt;token&gt;/worlds/" in section
