"""Every request body is bounded before it is buffered (`studio.body_limits`): in process,
the middleware driven message by message around an app that records what reached it; the
spool and the upload's temporary file on the data volume, and an upload moved, not copied;
then a real uvicorn process with small limits, sent bodies several times larger than them,
answering 413 before the body was sent and writing nothing to disk."""

from __future__ import annotations

import inspect
import json
import os
import select
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile, TemporaryUploadedFile
from django.core.signals import request_started
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart
from django.urls import path as route
from django.urls import reverse
from django.views.decorators.http import require_POST

from inference.worlds import parse_world
from studio.body_limits import UPLOAD_URL_NAMES, BodyLimit, Limit, accepts_upload, limit_for
from studio.models import ImportJob, Trajectory
from studio.services.tokens import create_token
from studio.services.worlds import save_world
from tests.support.aio import run_in_own_loop
from tests.support.imports import native_file
from tests.support.worker import ROOT, wait_for, worker_env

WORLD = {"name": "Shell", "domain": "terminal", "description": "A box.", "files": {"/a": "1"}}
LIMIT = Limit(1000, "STUDIO_MAX_FORM_BODY_KB", "a form", "page")


class RecordingApp:
    """An ASGI app double: reads the whole body, keeps every message it received, answers
    200 "stored"."""

    def __init__(self):
        self.called = False
        self.received: list[dict] = []

    async def __call__(self, scope, receive, send):
        self.called = True
        while True:
            message = await receive()
            self.received.append(message)
            if message["type"] == "http.disconnect":
                raise OSError("the client went away")  # as Starlette's ClientDisconnect
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"stored"})


_run = run_in_own_loop


def _scope(path="/login/", headers=()):
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }


def _drive(scope, chunks, *, limit=LIMIT, app=None):
    """Run the middleware on `chunks` (the body's messages, in order): what the app received,
    what was sent, and how many messages the middleware took from the client."""
    app = app or RecordingApp()
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    taken = 0
    sent: list[dict] = []

    async def receive():
        nonlocal taken
        taken += 1
        if taken > len(messages):
            raise AssertionError("read past the end of the body")
        return messages[taken - 1]

    async def send(message):
        sent.append(message)

    _run(BodyLimit(app, choose=lambda scope: limit)(scope, receive, send))
    return app, sent, taken


def _answer(sent) -> tuple[int, dict[str, str], bytes]:
    assert sent[0]["type"] == "http.response.start"
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return sent[0]["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


def test_a_declared_length_over_the_limit_is_refused_before_the_app_or_a_byte():
    scope = _scope(headers=[("content-length", "1001")])
    app, sent, taken = _drive(scope, [b"x" * 1001])
    assert not app.called and taken == 0  # not a byte of the body was read
    status, headers, body = _answer(sent)
    assert status == 413 and headers["connection"] == "close"
    assert "STUDIO_MAX_FORM_BODY_KB" in body.decode() and "1,000 bytes" in body.decode()
    assert "declares 1,001 bytes" in body.decode()


def test_a_chunked_body_is_cut_at_the_chunk_that_passes_the_limit():
    chunks = [b"a" * 400, b"b" * 400, b"c" * 400, b"d" * 400]
    app, sent, taken = _drive(_scope(), chunks)
    assert taken == 3  # the fourth chunk was never taken from the client
    # the app saw the two chunks under the limit, then a disconnect: it stored nothing
    assert [m["type"] for m in app.received] == ["http.request"] * 2 + ["http.disconnect"]
    status, _, body = _answer(sent)
    assert status == 413 and b"refused at 1,200 bytes" in body
    assert len(sent) == 2  # the 413 alone: the app's own answer was dropped


def test_a_body_under_the_limit_passes_through_untouched():
    chunks = [b"a" * 500, b"b" * 500]
    scope = _scope(headers=[("content-length", "1000")])
    app, sent, taken = _drive(scope, chunks)
    assert taken == 2
    assert app.received == [
        {"type": "http.request", "body": b"a" * 500, "more_body": True},
        {"type": "http.request", "body": b"b" * 500, "more_body": False},
    ]
    assert _answer(sent)[0] == 200 and _answer(sent)[2] == b"stored"


def test_an_app_error_not_caused_by_a_refusal_still_propagates():
    class Failing(RecordingApp):
        async def __call__(self, scope, receive, send):
            raise RuntimeError("a bug")

    with pytest.raises(RuntimeError):
        _drive(_scope(), [b"x"], app=Failing())


def test_websockets_and_lifespan_are_not_touched():
    seen = []

    async def app(scope, receive, send):
        seen.append((scope["type"], receive, send))

    async def receive():
        return {}

    async def send(message):
        return None

    _run(BodyLimit(app)({"type": "websocket", "path": "/env/"}, receive, send))
    assert seen == [("websocket", receive, send)]


def test_the_answers_name_the_limit_in_each_shape(settings):
    settings.STUDIO_EPISODE_MAX_BODY_KB = 1
    big = [("content-length", "5000")]
    _, sent, _ = _drive(
        _scope("/env/t/tok/worlds/1/reset", big),
        [],
        limit=limit_for(_scope("/env/t/tok/worlds/1/reset")),
    )
    status, headers, body = _answer(sent)
    answer = json.loads(body)
    assert (status, headers["content-type"], answer["code"]) == (
        413,
        "application/json",
        "TOO_LARGE",
    )
    assert "STUDIO_EPISODE_MAX_BODY_KB" in answer["detail"] and "1,024 bytes" in answer["detail"]

    mcp = _scope("/mcp/t/tok/worlds/1/", big)
    _, sent, _ = _drive(mcp, [], limit=limit_for(mcp))
    answer = json.loads(_answer(sent)[2])
    assert answer["error"]["code"] == -32600 and answer["jsonrpc"] == "2.0"
    assert "STUDIO_EPISODE_MAX_BODY_KB" in answer["error"]["message"] == answer["detail"]

    page = _scope("/login/", big)
    _, sent, _ = _drive(page, [])
    status, headers, body = _answer(sent)
    assert headers["content-type"].startswith("text/html") and b"<h1>Request too large</h1>" in body

    htmx = _scope("/login/", [*big, ("hx-request", "true")])
    _, sent, _ = _drive(htmx, [])
    status, headers, body = _answer(sent)
    # a fragment shown at the top of the target (studio.js lets a 413 swap), the form kept
    assert headers["hx-reswap"] == "afterbegin" and body.startswith(
        b'<ul class="messages"><li class="msg-error"'
    )


def _post_scope(path: str, content_type: str = "multipart/form-data; boundary=x") -> dict:
    return {"path": path, "method": "POST", "headers": [(b"content-type", content_type.encode())]}


def test_each_route_gets_its_limit(settings):
    settings.STUDIO_MAX_UPLOAD_BYTES = 3 * 1024 * 1024
    settings.STUDIO_MAX_FORM_BODY_BYTES = 20 * 1024
    settings.STUDIO_EPISODE_MAX_BODY_KB = 7
    uploads = [
        reverse("import_upload", args=[1]),
        reverse("world_import", args=[1]),
        reverse("campaign_new", args=[1]),
    ]
    assert len(uploads) == len(UPLOAD_URL_NAMES)  # every name in the set is a real route
    for path in uploads:
        limit = limit_for(_post_scope(path))
        assert (limit.setting, limit.bytes) == ("STUDIO_MAX_UPLOAD_MB", 3 * 1024 * 1024 + 64 * 1024)
    for path in ["/login/", reverse("project_list"), "/no/such/page/"]:
        limit = limit_for(_post_scope(path))
        assert (limit.setting, limit.bytes) == ("STUDIO_MAX_FORM_BODY_KB", 20 * 1024)
    # a GET, or a body that is not multipart, carries no upload: the form's limit
    assert limit_for({"path": uploads[0], "method": "GET"}).setting == "STUDIO_MAX_FORM_BODY_KB"
    urlencoded = _post_scope(uploads[2], "application/x-www-form-urlencoded")
    assert limit_for(urlencoded).setting == "STUDIO_MAX_FORM_BODY_KB"
    for path, answer in [
        ("/env/t/tok/worlds/1/step", "json"),
        ("/env/worlds/1/reset", "json"),
        ("/env/t/tok/worlds/1/mcp", "jsonrpc"),
        ("/mcp/t/tok/worlds/1/", "jsonrpc"),
    ]:
        limit = limit_for(_post_scope(path))
        assert (limit.setting, limit.bytes, limit.answer) == (
            "STUDIO_EPISODE_MAX_BODY_KB",
            7 * 1024,
            answer,
        )


def test_every_view_that_reads_files_is_an_upload_route():
    """A view that reads request.FILES outside the set would get the form's limit, and its
    uploads a 413: it must be named in UPLOAD_URL_NAMES (or marked with accepts_upload)."""
    import importlib

    readers = []
    for source in sorted((ROOT / "studio" / "views").glob("*.py")):
        module = importlib.import_module(f"studio.views.{source.stem}")
        for pattern in getattr(module, "urlpatterns", []):
            view = inspect.unwrap(pattern.callback)
            code = inspect.getsource(view)
            if "request.FILES" in code or "upload_handlers" in code:
                readers.append(pattern.name)
                marked = getattr(pattern.callback, "accepts_upload", False)
                assert pattern.name in UPLOAD_URL_NAMES or marked, pattern.name
    assert {"import_upload", "world_import", "campaign_new"} <= set(readers)


def test_djangos_spool_of_a_refused_body_is_dropped_and_no_view_runs(settings, db):
    """The whole stack in process: a chunked POST to /login/ over the form limit. The view
    never runs (no response of Django's), the answer is the 413."""
    from studio.asgi import application

    settings.STUDIO_MAX_FORM_BODY_BYTES = 4096
    chunks = [b"username=a&password=" + b"x" * 3000, b"y" * 3000, b"z" * 3000]
    messages = [
        {"type": "http.request", "body": c, "more_body": i < 2} for i, c in enumerate(chunks)
    ]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = _scope("/login/", [("content-type", "application/x-www-form-urlencoded")])
    scope.update({"server": ("testserver", 80), "client": ("127.0.0.1", 1), "scheme": "http",
                  "query_string": b"", "root_path": "", "http_version": "1.1", "asgi": {"version": "3.0"}})  # fmt: skip
    started = []

    def note(**kwargs):
        started.append(kwargs)

    request_started.connect(note, weak=False)
    try:
        _run(application(scope, receive, send))
    finally:
        request_started.disconnect(note)
    assert started == []  # Django dropped its spool at the disconnect: no request was made
    status, _, body = _answer(sent)
    assert status == 413 and len(sent) == 2 and b"STUDIO_MAX_FORM_BODY_KB" in body
    assert len(messages) == 1  # the last chunk was never read


def test_the_request_spool_is_on_the_data_volume(settings):
    from studio.asgi import django_app

    body = [{"type": "http.request", "body": b"x" * (1024 * 1024), "more_body": True}] * 3
    body.append({"type": "http.request", "body": b"", "more_body": False})

    async def receive():
        return body.pop(0)

    spool = _run(django_app.read_body(receive))
    try:
        assert spool._rolled  # past FILE_UPLOAD_MAX_MEMORY_SIZE: on disk, not memory
        where = os.readlink(f"/proc/self/fd/{spool.fileno()}")
        assert where.startswith(settings.FILE_UPLOAD_TEMP_DIR + "/"), where
        assert Path(settings.FILE_UPLOAD_TEMP_DIR).is_relative_to(settings.MEDIA_ROOT)
        assert len(spool.read()) == 3 * 1024 * 1024
    finally:
        spool.close()


def test_a_stored_upload_is_moved_not_copied(settings, tmp_path):
    from studio.services.import_jobs import store_upload

    upload = TemporaryUploadedFile("runs.jsonl", "application/jsonl", 0, None)
    upload.write(b'{"a": 1}\n' * 1000)
    temporary = upload.temporary_file_path()
    assert temporary.startswith(settings.FILE_UPLOAD_TEMP_DIR)
    inode = os.stat(temporary).st_ino
    path = store_upload(7, upload)
    assert path.read_bytes() == b'{"a": 1}\n' * 1000
    assert os.stat(path).st_ino == inode  # the same file: renamed, not written again
    assert not Path(temporary).exists()
    assert (os.stat(path).st_mode & 0o777) == settings.FILE_UPLOAD_PERMISSIONS
    upload.close()  # Django's close at the request's end: the file is gone, no error


# ---- a real uvicorn process ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def _web_process(log: Path, env: dict[str, str]) -> Iterator[int]:
    port = _free_port()
    out = open(log, "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=worker_env(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: proc.poll() is not None or _up(port), timeout=60)
        assert proc.poll() is None, log.read_text()[-3000:]
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()


def _post(port: int, path: str, size: int, *, chunked: bool, headers: dict[str, str]):
    """POST `size` bytes, sending until the server answers; the answer is read WITHOUT
    the rest of the body having been sent (a server that waited for it would time out).
    Returns (status, body, bytes of the body sent)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    sent, piece = 0, b"x" * 65536
    try:
        # declared: not a byte is sent, the answer must come on the headers; chunked: sent
        # until the server answers (the last piece and the terminating chunk never are)
        while chunked and sent < size - len(piece) and not select.select([sock], [], [], 0)[0]:
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed meanwhile: its answer is read below
    answer = b""
    try:
        while (data := sock.recv(65536)) and not _complete(answer := answer + data):
            pass
    except ConnectionResetError:
        pass  # closed with the rest of the body unread; what it answered was read
    finally:
        sock.close()
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 "), answer[:200]
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2], sent


def _complete(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if sep and name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def _big_files(*roots: Path) -> dict[str, int]:
    found = {}
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    found[path] = os.path.getsize(path)
                except OSError:
                    continue
    return found


@pytest.mark.django_db(transaction=True)
def test_a_real_server_refuses_big_bodies_before_they_are_read(
    tmp_path, project, researcher_client
):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {
        "STUDIO_MAX_UPLOAD_MB": "1",
        "STUDIO_MAX_FORM_BODY_KB": "16",
        "STUDIO_EPISODE_MAX_BODY_KB": "16",
        "TMPDIR": str(tmpdir),
    }
    data_dir = Path(django_settings.DATA_DIR)
    before = _big_files(tmpdir, data_dir)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    multipart = {"Content-Type": "multipart/form-data; boundary=b"}
    # a member's upload gets the upload limit; a visitor's (no session) a form's
    member = {**multipart, "Cookie": f"sessionid={researcher_client.cookies['sessionid'].value}"}
    jsonish = {"Content-Type": "application/json"}
    # a valid token and world: the episode API and MCP would read the body (an unknown
    # token is answered 401 before it is read)
    world = save_world(project, parse_world(WORLD)).world
    _, token = create_token(project, "agent")
    mcp_headers = {**jsonish, "Accept": "application/json, text/event-stream"}
    routes = [
        ("/login/", form, 8 * 1024 * 1024, "STUDIO_MAX_FORM_BODY_KB"),
        (f"/projects/{project.pk}/import/", member, 8 * 1024 * 1024, "STUDIO_MAX_UPLOAD_MB"),
        (f"/projects/{project.pk}/import/", multipart, 8 * 1024 * 1024, "STUDIO_MAX_FORM_BODY_KB"),
        (f"/env/t/{token}/worlds/{world.pk}/reset", jsonish, 4 * 1024 * 1024, "STUDIO_EPISODE_MAX_BODY_KB"),
        (f"/env/t/{token}/worlds/{world.pk}/mcp", jsonish, 4 * 1024 * 1024, "STUDIO_EPISODE_MAX_BODY_KB"),
        (f"/mcp/t/{token}/worlds/{world.pk}/", mcp_headers, 4 * 1024 * 1024, "STUDIO_EPISODE_MAX_BODY_KB"),
    ]  # fmt: skip
    with _web_process(tmp_path / "web.log", env) as port:
        for path, headers, size, setting in routes:
            for chunked in (False, True):
                status, body, sent = _post(port, path, size, chunked=chunked, headers=headers)
                assert status == 413, (path, chunked, body[:300])
                assert setting.encode() in body, (path, chunked, body[:300])
                assert sent < size - 65536 if chunked else sent == 0
        # under the limit the same route still reaches Django (the CSRF check's 403)
        login = urllib.request.Request(
            f"http://127.0.0.1:{port}/login/", data=b"username=a&password=b", headers=form
        )
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(login, timeout=30)
        assert answer.value.code == 403
    assert (tmp_path / "web.log").read_text().count("Traceback") == 0
    after = _big_files(tmpdir, data_dir)
    grown = {p: s for p, s in after.items() if s > 64 * 1024 and s - before.get(p, 0) > 64 * 1024}
    assert grown == {}
    assert ImportJob.objects.count() == 0 and Trajectory.objects.count() == 0


def _marked_view(request):
    raise AssertionError("never called")


urlpatterns = [route("marked/<int:pk>/", accepts_upload(require_POST(_marked_view)))]


def test_a_view_marked_accepts_upload_is_an_upload_route(settings):
    settings.ROOT_URLCONF = __name__  # the one route above
    assert limit_for(_post_scope("/marked/3/")).setting == "STUDIO_MAX_UPLOAD_MB"


@pytest.mark.django_db(transaction=True)
def test_an_upload_under_the_limit_through_a_real_server_is_moved_into_place(
    tmp_path, project, researcher_client
):
    """Through uvicorn and the middleware: a 3 MB file (past the 2 MB Django keeps in memory)
    under a 4 MB limit becomes an import job; its temporary file in uploads/incoming/ was
    moved (nothing is left there), and nothing went to TMPDIR."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    content = native_file(2, 22000)
    assert 2 * 1024 * 1024 < len(content) < 4 * 1024 * 1024
    secret = "b" * 32  # a CSRF secret of our own, in the cookie and the form
    body = encode_multipart(
        BOUNDARY,
        {"file": SimpleUploadedFile("big.json", content), "csrfmiddlewaretoken": secret},
    )
    incoming = Path(django_settings.FILE_UPLOAD_TEMP_DIR)
    env = {"STUDIO_MAX_UPLOAD_MB": "4", "TMPDIR": str(tmpdir)}
    with _web_process(tmp_path / "web.log", env) as port:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/projects/{project.pk}/import/",
            data=body,
            headers={
                "Content-Type": MULTIPART_CONTENT,
                "Cookie": f"sessionid={researcher_client.cookies['sessionid'].value}; "
                f"csrftoken={secret}",
                "HX-Request": "true",
            },
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 200
    job = ImportJob.objects.get()
    assert Path(job.stored_path).read_bytes() == content and job.size_bytes == len(content)
    assert list(incoming.iterdir()) == [] and list(tmpdir.iterdir()) == []
