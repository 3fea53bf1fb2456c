"""Behaviour search in a real browser, as a new user of the demo does it: from the library's
Behaviour search button, describe a behaviour, run it with the scripted demo judge and
embeddings (`manage.py demo_models`, here in this process) on the real worker, watch the page
go from queued to done without a reload, open a group of reasons, make it an annotation
queue, and find those steps in the queue."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from studio.demo_data import scripted_models as S
from studio.models import AnnotationQueue, BehaviourSearch, JobStatus, Project
from tests.support.browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_behaviour_search_of_the_demo_becomes_a_queue_of_a_group(
    page, login, live_server, default_worker, monkeypatch
):
    with S.running() as url:
        monkeypatch.setenv("STUDIO_DEMO_MODELS_URL", url)
        call_command("load_demo", stdout=StringIO())
        demo = Project.objects.get(name="Demo")
        login(page, "researcher")
        page.goto(f"{live_server.url}/projects/{demo.pk}/")
        page.click("#behaviour-link")
        page.wait_for_url(re.compile(r"/behaviour/$"))
        expect(page.locator("#behaviour-none")).to_be_visible()
        page.click("#behaviour-new")
        page.wait_for_url(re.compile(r"/behaviour/new/$"))
        expect(page.locator("#behaviour-embedder")).to_contain_text("Scripted demo embeddings")
        expect(page.locator("select[name=judge]")).to_have_value(
            str(demo.endpoints.get(name="Scripted demo judge").pk)
        )
        page.fill("textarea[name=description]", "the observation shows an error")
        # a query the search language refuses is said on its field, the form kept
        page.fill("input[name=query]", 'action:"rm')
        page.click("#behaviour-start")
        expect(page.locator("#behaviour-form .errorlist")).to_have_text(
            "Unclosed quote (column 8)."
        )
        expect(page.locator("textarea[name=description]")).to_have_value(
            "the observation shows an error"
        )
        assert not BehaviourSearch.objects.exists()
        page.fill("input[name=query]", "")  # every step of the project
        shot(page, "behaviour-new")
        page.click("#behaviour-start")
        page.wait_for_url(re.compile(r"/behaviour/\d+/$"))
        job = BehaviourSearch.objects.get()
        expect(page.locator("#behaviour-description")).to_contain_text(
            "the observation shows an error"
        )
        shot(page, "behaviour-running")
        page.locator("#behaviour-state[data-job-status=succeeded]").wait_for(timeout=90_000)
        expect(page.locator("#behaviour-status")).to_have_text("Done")
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED and job.matched > 2 and job.clustered
        expect(page.locator("#behaviour-counts")).to_contain_text(
            f"{job.candidates} candidates: {job.labelled} labelled by the judge "
            f"({job.matched} matches, {job.labelled - job.matched} no), 0 failed"
        )
        expect(page.locator("#behaviour-cost tr[data-role=judge] td.cost")).to_have_text(
            "no price set"
        )
        chips = page.locator(".behaviour-cluster")
        assert chips.count() == job.clusters.count() >= 2
        shot(page, "behaviour-done")

        # the second group (a smaller one): only its matches are listed, then made a queue
        cluster = job.clusters.order_by("order")[1]
        page.click(f".behaviour-cluster[data-cluster='{cluster.pk}']")
        page.wait_for_url(re.compile(rf"\?cluster={cluster.pk}$"))
        in_group = sorted(cluster.labels.values_list("step_id", flat=True))
        rows = page.locator("#behaviour-labels tbody tr")
        expect(rows).to_have_count(len(in_group))
        listed = sorted(int(s) for s in rows.evaluate_all("rs => rs.map(r => r.dataset.step)"))
        assert listed == in_group
        # each opens its trajectory at its step
        href = rows.first.locator("a.behaviour-open").get_attribute("href") or ""
        opened = re.fullmatch(r"/trajectories/\d+/\?branch=\d+&step=(\d+)#step-\1", href)
        assert opened, href
        trajectory_page = page.context.new_page()
        trajectory_page.goto(live_server.url + href)
        expect(trajectory_page.locator(f"#step-{opened.group(1)}")).to_have_class(
            re.compile(r"\bcurrent\b")
        )
        trajectory_page.close()
        shot(page, "behaviour-cluster")
        page.fill("#make-queue input[name=name]", "errors to check")
        page.click("#make-queue button[type=submit]")
        page.wait_for_url(re.compile(r"/queues/\d+/$"))
        queue = AnnotationQueue.objects.get(name="errors to check")
        assert sorted(queue.items.values_list("step_id", flat=True)) == in_group
        expect(page.locator("body")).to_contain_text(
            f"Made the queue 'errors to check' of {len(in_group)} steps."
        )
        expect(page.locator("body")).to_contain_text(f'in the group "{cluster.name}"')
        shot(page, "behaviour-queue")
        # the queue's first item is one of the group's steps, shown for annotation
        page.click("#queue-start")
        page.wait_for_url(re.compile(r"/steps/\d+/annotate/"))
        step_id = int(re.search(r"/steps/(\d+)/annotate/", page.url).group(1))
        assert step_id in in_group
