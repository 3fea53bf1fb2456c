"""In production (DEBUG off) errors are the studio's own pages, never Django's debug page."""

from __future__ import annotations

from django.test import RequestFactory, override_settings
from django.views.defaults import server_error


@override_settings(DEBUG=False)
def test_not_found_and_not_allowed_are_the_studios_pages(researcher_client, project):
    r = researcher_client.get("/no/such/page/")
    html = r.content.decode()
    assert r.status_code == 404 and 'id="error-page"' in html and "AgentWorld" in html
    assert "Your projects" in html and "Django" not in html and "Traceback" not in html
    assert "Resolver404" not in html and "nothing at this address." in html
    r = researcher_client.get(f"/projects/{project.other.pk}/")  # someone else's project
    assert r.status_code == 404 and 'id="error-page"' in r.content.decode()
    researcher_client.force_login(project.users["annotator"])
    r = researcher_client.get(f"/projects/{project.pk}/import/")
    html = r.content.decode()
    assert r.status_code == 403 and "Annotators can view but not change" in html
    assert 'id="error-page"' in html


@override_settings(DEBUG=False)
def test_a_server_error_is_the_studios_page_without_details():
    response = server_error(RequestFactory().get("/"))
    html = response.content.decode()
    assert response.status_code == 500 and "Something went wrong" in html
    assert 'id="error-page"' in html and "Traceback" not in html
