from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from studio.models import Membership, Project, Role
from studio.services.endpoints import seed_endpoints
from tests.support.jobs import drain_jobs
from tests.support.worker import purge_test_queues, running_worker

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _isolated_queues():
    # Each test run gets its own queue names so a developer's running worker never
    # takes test jobs, and two runs never see each other's jobs.
    settings.STUDIO_QUEUE_PREFIX = f"test{os.getpid()}-"
    yield
    purge_test_queues()


@pytest.fixture(autouse=True)
def _fresh_rate_windows():
    """Every test starts with no resets or steps counted: a test database hands out token
    ids again, and Redis (which counts them where it is the broker) outlives the flush."""
    from studio.jobs.replies import redis_url

    if redis_url() is not None:
        import redis

        client = redis.Redis.from_url(str(redis_url()), socket_timeout=2)
        keys = list(client.scan_iter(f"{settings.STUDIO_QUEUE_PREFIX}studio:rate:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's, then, before it drops the test database, the connections of threads
    that ended (an event loop's executor: `sync_to_async(thread_sensitive=False)`) collected
    and so closed: one left open keeps the database from being dropped, and under xdist each
    process drops its own at its end, after whichever file it ran last."""
    yield
    import gc

    gc.collect()


@pytest.fixture(scope="session")
def default_worker(django_db_setup, django_db_blocker):
    """One real worker on this run's default and gpu queues, shared by every test that only
    needs a worker (they start slowly); tests that need a worker configured otherwise start
    their own on queues of their own (`isolated_queues`)."""
    with running_worker(("default", "gpu")) as proc:
        yield proc


@pytest.fixture(scope="session")
def episode_worker(django_db_setup, django_db_blocker):
    """A worker on this run's episodes queue, on a threads pool as `scripts/dev.sh` and
    docker-compose run it: steps of episodes played by outside agents."""
    with running_worker(("episodes",), pool="threads", concurrency=4) as proc:
        yield proc


@pytest.fixture
def isolated_queues(settings):
    """Queue names of this test alone: its own workers (a special environment, one it kills)
    never share a queue with the shared worker."""
    settings.STUDIO_QUEUE_PREFIX = f"{settings.STUDIO_QUEUE_PREFIX}{uuid.uuid4().hex[:8]}-"
    yield settings.STUDIO_QUEUE_PREFIX
    purge_test_queues()


@pytest.fixture(autouse=True)
def _drain_jobs(request):
    """A test whose data a worker can see (transactional) ends only when no job of it can
    still write: its database is flushed next (TRUNCATE on PostgreSQL), and a job writing
    meanwhile deadlocks with it and breaks the next test's set-up."""
    db_mark = request.node.get_closest_marker("django_db")
    transactional = db_mark is not None and (
        db_mark.kwargs.get("transaction") or (db_mark.args and db_mark.args[0])
    )
    uses_live_db = {"live_server", "transactional_db"} & set(request.fixturenames)
    if request.node.get_closest_marker("worker") is None and not (transactional or uses_live_db):
        yield
        return
    request.getfixturevalue("transactional_db")  # set up before this, flushed after it
    yield
    drain_jobs()


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA} (expected ../shared/data)")
    return SHARED_DATA


@pytest.fixture
def make_user(django_user_model):
    def make(username: str, password: str = "pw-for-tests-1"):
        return django_user_model.objects.create_user(username=username, password=password)

    return make


@pytest.fixture
def project(db, make_user):
    """A project with one user per role, plus an outsider who belongs to another project."""
    proj = Project.objects.create(name="Test project")
    seed_endpoints(proj)  # as every new project: the environment's models (the baseline here)
    users = {}
    for role in (Role.ADMIN, Role.RESEARCHER, Role.ANNOTATOR):
        user = make_user(role.value)
        Membership.objects.create(project=proj, user=user, role=role)
        users[role.value] = user
    outsider = make_user("outsider")
    other = Project.objects.create(name="Other project")
    Membership.objects.create(project=other, user=outsider, role=Role.ADMIN)
    proj.users = users  # type: ignore[attr-defined]
    proj.outsider = outsider  # type: ignore[attr-defined]
    proj.other = other  # type: ignore[attr-defined]
    return proj


@pytest.fixture
def world_endpoints(project):
    """The project's world models by kind; a fake server's endpoint is added by the tests."""
    return {e.kind: e for e in project.endpoints.filter(role="world")}


@pytest.fixture
def researcher_client(client, project):
    client.force_login(project.users["researcher"])
    return client


@pytest.fixture
def annotator_client(client, project):
    client.force_login(project.users["annotator"])
    return client


@pytest.fixture
def outsider_client(client, project):
    client.force_login(project.outsider)
    return client


CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}; install Debian's chromium package")
    # Playwright's sync API runs an event loop in this thread; Django must allow ORM calls.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15000)
    yield pg
    context.close()


@pytest.fixture
def login_with_form(live_server):
    """Sign in as a person does: the login page, the form, the redirect."""

    def do_login(page, username: str, password: str = "pw-for-tests-1"):
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)
        return page

    return do_login


@pytest.fixture
def login(live_server):
    """Signed in at once (a session made for the user, its cookie given to the browser),
    then on the projects page as after the login form; the form itself is tested once."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    def do_login(page, username: str, password: str = "pw-for-tests-1"):
        client = Client()
        client.force_login(get_user_model().objects.get(username=username))
        session = client.cookies[settings.SESSION_COOKIE_NAME].value
        page.context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}]
        )
        page.goto(f"{live_server.url}/")
        return page

    return do_login
