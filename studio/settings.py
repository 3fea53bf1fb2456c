"""The one settings module: everything configurable comes from the environment (see README)."""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta
from pathlib import Path

from csp.constants import NONE, SELF, UNSAFE_INLINE

from inference.simulation.limits import (
    BACKENDS,
    DEFAULT_WORLD_MODEL,
    MAX_FUTURES,
    OFFLINE_BACKEND,
)
from studio.env import (
    SQLITE_TRANSPORT,
    ConfigError,
    choose_broker,
    env_bool,
    env_int,
    env_key_bindings,
    env_list,
    env_str,
    parse_database_url,
    read_dev_runtime,
)
from studio.importers import limits as import_limits
from studio.services.endpoint_hosts import DEFAULT_ALLOWED_HOSTS, parse_allowed_hosts

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("STUDIO_DATA_DIR", str(BASE_DIR / "var")) or BASE_DIR / "var")
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY") or ""
if not SECRET_KEY:
    if not DEBUG:
        raise ConfigError(
            "SECRET_KEY must be set when DEBUG is off (export SECRET_KEY=... or DEBUG=1)"
        )
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"

# Fernet keys that encrypt stored API keys (see studio/secrets.py); unset: derived from
# SECRET_KEY.
STUDIO_ENCRYPTION_KEYS = env_list("STUDIO_ENCRYPTION_KEYS", [])
for _key in STUDIO_ENCRYPTION_KEYS:
    try:
        import base64 as _b64

        if len(_b64.urlsafe_b64decode(_key.encode())) != 32:
            raise ValueError
    except ValueError:
        raise ConfigError(
            "STUDIO_ENCRYPTION_KEYS holds a value that is not a Fernet key (32 url-safe base64 "
            "bytes; make one with: python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())')"
        ) from None

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"] if DEBUG else []
)
if not DEBUG and not ALLOWED_HOSTS:
    raise ConfigError("ALLOWED_HOSTS must be set when DEBUG is off (comma-separated host names)")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "csp",  # the Content-Security-Policy header (django-csp; policy below)
    "studio",
    # login throttling (its own migrations: failed attempts, sign-in log)
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # before WhiteNoise, so static files get the policy too (an SVG can carry scripts)
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # last, as django-axes asks: turns a locked-out sign-in into the lock-out page
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "studio.urls"
WSGI_APPLICATION = "studio.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "builtins": ["studio.templatetags.studio_tags"],
        },
    }
]

# What a running scripts/dev.sh chose for this data dir (its database and broker), for a
# shell or worker in another terminal; None whenever the environment says (studio.env).
DEV_RUNTIME = read_dev_runtime(str(DATA_DIR))
DATABASE_URL = (
    env_str("DATABASE_URL")
    or (DEV_RUNTIME or {}).get("database_url")
    or f"sqlite:///{DATA_DIR / 'studio.sqlite3'}"
)
DATABASES = {"default": parse_database_url(DATABASE_URL)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # WAL and a busy timeout let the web process and workers share one SQLite file;
    # a file-backed test database lets a real worker process see what tests write.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-studio.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "project_list"
LOGOUT_REDIRECT_URL = "login"

# ---- Login throttling (django-axes) ------------------------------------------------------
# After STUDIO_LOGIN_FAILURE_LIMIT wrong passwords for one username from one client IP, that
# pair is locked out for STUDIO_LOGIN_LOCKOUT_MINUTES: the right password is refused too, and
# the login page says so (HTTP 429). An admin unlocks at once: `manage.py axes_reset_username
# NAME` (or `axes_reset`), or by deleting the access attempt in /admin/.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out sign-in
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("STUDIO_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("STUDIO_LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True  # a good sign-in forgets the earlier failures
# Attempts during a lock-out are refused without being counted: the lock-out ends when the
# page said it would, however often someone tries meanwhile.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "studio.views.lockout.lockout_response"
# The client's IP: REMOTE_ADDR, which uvicorn takes from X-Forwarded-For only when the
# connection comes from an address in STUDIO_TRUSTED_PROXIES (scripts/web.sh passes it to
# uvicorn; empty: no proxy is believed, a client's header is ignored). A proxy that sets a
# header of its own instead (e.g. X-Real-IP) is named by STUDIO_CLIENT_IP_HEADER; that header
# must be set by the proxy on every request, or a client could choose its own IP.
STUDIO_TRUSTED_PROXIES = env_list("STUDIO_TRUSTED_PROXIES", [])
for _proxy in STUDIO_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy)  # an address is a network of one
    except ValueError:
        raise ConfigError(
            f"STUDIO_TRUSTED_PROXIES holds {_proxy!r}, which is not an IP address or network "
            "(the proxies whose X-Forwarded-For is believed, e.g. 172.28.0.10 or 10.0.0.0/24; "
            "'*' is refused: any client could then choose its own address)"
        ) from None
if os.environ.get("FORWARDED_ALLOW_IPS") and not STUDIO_TRUSTED_PROXIES:
    raise ConfigError(
        "FORWARDED_ALLOW_IPS is not read (scripts/web.sh turns uvicorn's proxy headers off "
        "unless STUDIO_TRUSTED_PROXIES names the proxies): set STUDIO_TRUSTED_PROXIES instead"
    )
_ip_header = (env_str("STUDIO_CLIENT_IP_HEADER", "") or "").strip()
if _ip_header and not _ip_header.replace("-", "").isalnum():
    raise ConfigError(f"STUDIO_CLIENT_IP_HEADER={_ip_header!r} is not a header name (X-Real-IP)")
_ip_meta = "HTTP_" + _ip_header.upper().replace("-", "_")
AXES_IPWARE_META_PRECEDENCE_ORDER = (_ip_meta, "REMOTE_ADDR") if _ip_header else ("REMOTE_ADDR",)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where collectstatic puts the files WhiteNoise serves with DEBUG off. The image collects
# them at build time into a folder of its own (the Dockerfile sets STUDIO_STATIC_ROOT), so
# every replica serves the same files whatever volume holds its data dir.
STATIC_ROOT = Path(env_str("STUDIO_STATIC_ROOT", "") or DATA_DIR / "staticfiles")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Serve straight from static/ (no collectstatic needed) in development and tests.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
MEDIA_ROOT = DATA_DIR / "uploads"
MEDIA_ROOT.mkdir(parents=True, exist_ok=True)
# Where a request body (under uvicorn, `studio.asgi`) and an uploaded file past 2 MB are
# written as they arrive: beside MEDIA_ROOT, on its filesystem, so that storing an upload is a
# rename (`studio.services.import_jobs.store_upload`), not a second copy, and not in /tmp.
FILE_UPLOAD_TEMP_DIR = str(MEDIA_ROOT / "incoming")
Path(FILE_UPLOAD_TEMP_DIR).mkdir(parents=True, exist_ok=True)
# The largest request body (`studio.body_limits`, refused before it is read): a page's form
# (a world typed into its editor fits), its fields other than files, STUDIO_MAX_FORM_BODY_KB;
# an upload, STUDIO_MAX_UPLOAD_MB (and 64 KB for its form); the episode API and MCP,
# STUDIO_EPISODE_MAX_BODY_KB (below). A file past 2 MB goes to a temporary file, not memory.
STUDIO_MAX_FORM_BODY_BYTES = env_int("STUDIO_MAX_FORM_BODY_KB", 10 * 1024 + 64, minimum=1) * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = STUDIO_MAX_FORM_BODY_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
STUDIO_MAX_UPLOAD_BYTES = env_int("STUDIO_MAX_UPLOAD_MB", 512, minimum=1) * 1024 * 1024
# Uploads a person may make in any hour, over every project (studio.services.upload_limits).
STUDIO_MAX_UPLOADS_PER_HOUR = env_int("STUDIO_MAX_UPLOADS_PER_HOUR", 60, minimum=1)
# A search's regular expression (re:/.../) runs in Python over at most this many steps.
STUDIO_SEARCH_REGEX_CANDIDATES = env_int("STUDIO_SEARCH_REGEX_CANDIDATES", 20_000, minimum=1)
# ... and for at most this long (milliseconds): past it the search stops and says why (a
# pattern that backtracks for ever must not hold a web process).
STUDIO_SEARCH_REGEX_MS = env_int("STUDIO_SEARCH_REGEX_MS", 2000, minimum=1)
# Behaviour search (`studio.jobs.behaviour`): the most candidates (steps or trajectories) one
# job may ask the judge about; a form's "max candidates" is bounded by it.
STUDIO_BEHAVIOUR_MAX_CANDIDATES = env_int("STUDIO_BEHAVIOUR_MAX_CANDIDATES", 2000, minimum=1)
# How long the file of a failed or cancelled import is kept for Retry (days after it stopped);
# the workers' sweep removes it then, and at once after a successful import.
STUDIO_UPLOAD_RETENTION_DAYS = env_int("STUDIO_UPLOAD_RETENTION_DAYS", 7, minimum=0)
# What one import may read (studio.importers.limits, where the defaults are explained): JSON
# nesting depth, a file's size, a JSONL line's length, one kept JSON field (metadata, tools,
# a step's meta). Past one, the import fails naming the file, the line or record, the limit.
STUDIO_IMPORT_MAX_DEPTH = env_int(
    "STUDIO_IMPORT_MAX_DEPTH", import_limits.DEFAULT_MAX_DEPTH, minimum=2
)
if STUDIO_IMPORT_MAX_DEPTH > import_limits.MAX_DEPTH_CEILING:
    raise ConfigError(
        f"STUDIO_IMPORT_MAX_DEPTH={STUDIO_IMPORT_MAX_DEPTH} must be at most "
        f"{import_limits.MAX_DEPTH_CEILING} (deeper JSON overflows Python's stack)"
    )
STUDIO_IMPORT_MAX_FILE_BYTES = import_limits.MB * env_int(
    "STUDIO_IMPORT_MAX_FILE_MB", import_limits.DEFAULT_MAX_FILE_MB, minimum=1
)
STUDIO_IMPORT_MAX_LINE_BYTES = import_limits.MB * env_int(
    "STUDIO_IMPORT_MAX_LINE_MB", import_limits.DEFAULT_MAX_LINE_MB, minimum=1
)
STUDIO_IMPORT_MAX_FIELD_BYTES = import_limits.MB * env_int(
    "STUDIO_IMPORT_MAX_FIELD_MB", import_limits.DEFAULT_MAX_FIELD_MB, minimum=1
)
# What a project archive (`manage.py project_archive import`) may uncompress to, counted as it
# is read: in all (a whole project with its carried files; 64 GB) and one line (a row, or a
# 1 MB chunk of a carried file as base64; a row with a long observation fits in 256 MB). Past
# either the import stops naming the line and the limit, and writes nothing: a gzip bomb.
STUDIO_ARCHIVE_MAX_BYTES = import_limits.MB * env_int("STUDIO_ARCHIVE_MAX_MB", 65536, minimum=1)
STUDIO_ARCHIVE_MAX_LINE_BYTES = import_limits.MB * env_int(
    "STUDIO_ARCHIVE_MAX_LINE_MB", 256, minimum=1
)

# ---- HTTPS and browser security ----------------------------------------------------------
# With DEBUG off the studio expects HTTPS, and `manage.py check --deploy` has nothing to say:
# plain HTTP is redirected, cookies are sent over HTTPS only, browsers are told to use HTTPS
# for a year (HSTS). Each is switchable for the set-up in front of the studio (see README):
# STUDIO_BEHIND_TLS_PROXY=1 when a proxy ends TLS and sends X-Forwarded-Proto (trusted only
# then: without a proxy that sets it, a client could send the header itself);
# STUDIO_SSL_REDIRECT=0 when the proxy redirects HTTP itself, or on plain HTTP (with
# SECURE_COOKIES=0, as docker-compose runs by default). The variables are read even with DEBUG
# on, so a malformed value fails in development too; DEBUG turns the HTTPS parts off (the
# local set-up, scripts/dev.sh and the tests, run on plain http://127.0.0.1).
_behind_tls_proxy = env_bool("STUDIO_BEHIND_TLS_PROXY", False)
if _behind_tls_proxy:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("STUDIO_SSL_REDIRECT", True) and not DEBUG
# Load balancers and container health checks probe over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
# Sent on HTTPS responses only (browsers ignore it over HTTP). includeSubDomains covers the
# hosts below the studio's own name only. `preload` (STUDIO_HSTS_PRELOAD=1) is off by
# default: it asks browsers to ship the rule for the whole registered domain, which is for
# the domain's owner to decide and takes months to undo; check --deploy's reminder of it
# (security.W021) is silenced while it is off.
_hsts_seconds = env_int("STUDIO_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)  # 0: no HSTS
SECURE_HSTS_SECONDS = 0 if DEBUG else _hsts_seconds
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = env_bool("STUDIO_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True) and not DEBUG
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# No page of ours is ever framed: HTML observations are shown in `srcdoc` iframes (the page
# inline, studio/rendering/html_view.py), which load no URL of ours.
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (django-csp) on every response. Scripts only from our static files
# (htmx and Plotly are in static/vendor): no inline script, no on*= handler, no eval (htmx
# evals only hx-on, js: values and [filter] triggers, which no template uses; base.html's
# htmx-config turns eval off). Styles may be inline: HTML observations are recorded pages
# whose look is their own <style> and style= (their srcdoc iframe inherits this policy, on
# top of the stricter one it carries itself, see html_view.py), and Plotly writes a <style>
# element and style attributes as it draws. An inline style runs no code; our templates use
# a few for computed widths and indents.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "frame-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# ---- Celery -----------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL") or None
if DEV_RUNTIME is not None and DEV_RUNTIME["broker"] == "redis":
    REDIS_URL = DEV_RUNTIME["redis_url"]
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS, BROKER_DESCRIPTION = choose_broker(
    REDIS_URL,
    str(DATA_DIR),
    forced=None
    if DEV_RUNTIME is None or DEV_RUNTIME["broker"] == "redis"
    else DEV_RUNTIME["broker"],
)
if DEV_RUNTIME is not None:
    BROKER_DESCRIPTION = (
        f"{DEV_RUNTIME.get('broker_description') or BROKER_DESCRIPTION}, as scripts/dev.sh "
        f"(pid {DEV_RUNTIME['pid']}) chose it ({DATA_DIR / 'dev-runtime.json'})"
    )
if CELERY_BROKER_URL.startswith("sqlite:"):
    # The embedded broker: kombu's SQLAlchemy transport, tuned (studio.jobs.sqlite_broker).
    CELERY_BROKER_TRANSPORT = SQLITE_TRANSPORT
# The longest job we allow; the broker must not redeliver a job that is still running.
STUDIO_JOB_HARD_LIMIT_S = env_int("STUDIO_JOB_HARD_LIMIT_S", 3600, minimum=6)
# The soft limit lets a job stop itself and say why before the hard kill.
STUDIO_JOB_SOFT_LIMIT_S = max(STUDIO_JOB_HARD_LIMIT_S // 2, STUDIO_JOB_HARD_LIMIT_S - 30)
# A job whose worker died is marked failed ("worker lost") within this many seconds by the
# sweeper every worker runs (see studio.jobs.runtime for the heartbeat and sweep periods).
STUDIO_JOB_STALE_S = env_int("STUDIO_JOB_STALE_S", 120, minimum=2)
if CELERY_BROKER_URL.startswith(("redis", "unix")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": STUDIO_JOB_HARD_LIMIT_S + 600}
elif CELERY_BROKER_URL.startswith("sqlite:"):
    # No visibility timeout there (a delivered message is never delivered again while its
    # job runs); what a killed worker had taken is dropped after the longest a job may run.
    CELERY_BROKER_TRANSPORT_OPTIONS["orphaned_after_s"] = STUDIO_JOB_HARD_LIMIT_S + 600
# Workers write their heartbeat row every third of this; a worker silent this long is gone
# (the job pages and `simulate --wait` say so, `studio.services.workers`).
STUDIO_WORKER_GONE_S = env_int("STUDIO_WORKER_GONE_S", 15, minimum=2)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_TIME_LIMIT = STUDIO_JOB_HARD_LIMIT_S
CELERY_TASK_SOFT_TIME_LIMIT = STUDIO_JOB_SOFT_LIMIT_S
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery closes a task's database connection before and after every task unless told to
# reuse it: a new PostgreSQL connection per step of an episode cost more than the step's own
# queries. Reused for this many tasks, then opened afresh (a connection that failed is
# closed at the next task's start, `studio.jobs.episode_steps`).
CELERY_DB_REUSE_MAX = env_int("STUDIO_WORKER_DB_REUSE", 1000, minimum=0)
# A step of an episode is one model call: the longest it may wait for the model's answer (one
# retry after a failure), and the agent hears that it failed.
STUDIO_EPISODE_STEP_TIMEOUT_S = env_int("STUDIO_EPISODE_STEP_TIMEOUT_S", 300, minimum=1)
# Tests give every run its own queue names so a developer's worker never steals test jobs.
STUDIO_QUEUE_PREFIX = env_str("STUDIO_QUEUE_PREFIX", "") or ""
# What one project may ask of the workers (studio.services.job_limits says how each counts):
# futures per simulation (at most the hard maximum, MAX_FUTURES), turns and text of history
# a simulation sends the model, jobs queued or running at once, episode steps waiting.
STUDIO_MAX_FUTURES = env_int("STUDIO_MAX_FUTURES", MAX_FUTURES, minimum=1)
if STUDIO_MAX_FUTURES > MAX_FUTURES:
    raise ConfigError(f"STUDIO_MAX_FUTURES={STUDIO_MAX_FUTURES} must be at most {MAX_FUTURES}")
STUDIO_MAX_HISTORY_STEPS = env_int("STUDIO_MAX_HISTORY_STEPS", 5000, minimum=1)
STUDIO_MAX_HISTORY_BYTES = env_int("STUDIO_MAX_HISTORY_MB", 64, minimum=1) * 1024 * 1024
STUDIO_MAX_ACTIVE_JOBS = env_int("STUDIO_MAX_ACTIVE_JOBS", 20, minimum=1)
STUDIO_MAX_ACTIVE_EPISODE_STEPS = env_int("STUDIO_MAX_ACTIVE_EPISODE_STEPS", 64, minimum=1)
# What one agent may send the episode API (`studio.services.episode_limits`): the size of a
# request body, of one action and of a task's text, and resets and steps per token per minute
# (a refusal names its setting; 429s carry Retry-After).
STUDIO_EPISODE_MAX_BODY_KB = env_int("STUDIO_EPISODE_MAX_BODY_KB", 1024, minimum=1)
STUDIO_EPISODE_MAX_ACTION_KB = env_int("STUDIO_EPISODE_MAX_ACTION_KB", 256, minimum=1)
STUDIO_EPISODE_MAX_TASK_KB = env_int("STUDIO_EPISODE_MAX_TASK_KB", 64, minimum=1)
STUDIO_EPISODE_RESETS_PER_MINUTE = env_int("STUDIO_EPISODE_RESETS_PER_MINUTE", 120, minimum=1)
STUDIO_EPISODE_STEPS_PER_MINUTE = env_int("STUDIO_EPISODE_STEPS_PER_MINUTE", 6000, minimum=1)
# The gpu worker answers the steps of many episodes that arrive together in one engine call
# (`inference.step_batcher`): the first waits this long for others, a call takes at most this
# many rows.
STUDIO_GPU_BATCH_WINDOW_MS = env_int("STUDIO_GPU_BATCH_WINDOW_MS", 5, minimum=0)
STUDIO_GPU_BATCH_MAX_ROWS = env_int("STUDIO_GPU_BATCH_MAX_ROWS", 16, minimum=1)
# An episode that took no step this long after its reset is deleted by the sweeper (a reset
# alone records nothing worth keeping; the library hides such episodes meanwhile).
STUDIO_EMPTY_EPISODE_TTL_S = env_int("STUDIO_EMPTY_EPISODE_TTL_S", 3600, minimum=60)
# Rollout campaigns (`studio.jobs.campaigns`): episodes one campaign plays at once (its
# default, and the most it may ask for), and the most episodes one campaign may hold.
STUDIO_CAMPAIGN_CONCURRENCY = env_int("STUDIO_CAMPAIGN_CONCURRENCY", 4, minimum=1)
STUDIO_CAMPAIGN_MAX_CONCURRENCY = env_int("STUDIO_CAMPAIGN_MAX_CONCURRENCY", 16, minimum=1)
STUDIO_CAMPAIGN_MAX_EPISODES = env_int("STUDIO_CAMPAIGN_MAX_EPISODES", 2000, minimum=1)

# ---- World model ------------------------------------------------------------------------
# Default backend for simulations when a request does not name one: the retrieval baseline
# works offline with no model, so the demo always runs.
WORLD_MODEL_BACKEND = env_str("WORLD_MODEL_BACKEND", OFFLINE_BACKEND) or OFFLINE_BACKEND
if WORLD_MODEL_BACKEND not in BACKENDS:
    raise ConfigError(
        f"WORLD_MODEL_BACKEND={WORLD_MODEL_BACKEND!r} must be one of {', '.join(BACKENDS)}"
    )
WORLD_MODEL_BASE_URL = env_str("WORLD_MODEL_BASE_URL", "") or ""
WORLD_MODEL_NAME = env_str("WORLD_MODEL_NAME", DEFAULT_WORLD_MODEL) or ""
WORLD_MODEL_API_KEY = env_str("WORLD_MODEL_API_KEY", "EMPTY") or "EMPTY"
WORLD_MODEL_PATH = env_str("WORLD_MODEL_PATH", "") or ""
WORLD_MODEL_CONCURRENCY = env_int("WORLD_MODEL_CONCURRENCY", 8, minimum=1)
AGENT_MODEL_BASE_URL = env_str("AGENT_MODEL_BASE_URL", "") or WORLD_MODEL_BASE_URL
AGENT_MODEL_NAME = env_str("AGENT_MODEL_NAME", "") or WORLD_MODEL_NAME
AGENT_MODEL_API_KEY = env_str("AGENT_MODEL_API_KEY", "") or WORLD_MODEL_API_KEY
# Environment variables an endpoint may name as its API key, each bound to the base URL it
# may be sent to (WORLD_MODEL_API_KEY and AGENT_MODEL_API_KEY are bound to their own base
# URLs without being listed): a project member cannot point an endpoint at a server of
# theirs and have a worker send it the operator's key.
STUDIO_ENDPOINT_KEY_ENVS = env_key_bindings("STUDIO_ENDPOINT_KEY_ENVS")
# The hosts endpoints may reach besides those of the URLs above (and STUDIO_DEMO_MODELS_URL):
# names, addresses, CIDR networks or *; checked on save and before every request
# (studio.services.endpoint_hosts), so no member makes the studio reach other hosts.
STUDIO_ENDPOINT_ALLOWED_HOSTS = parse_allowed_hosts(
    "STUDIO_ENDPOINT_ALLOWED_HOSTS",
    env_list("STUDIO_ENDPOINT_ALLOWED_HOSTS", DEFAULT_ALLOWED_HOSTS),
)
# Who may create projects, and who may add, edit, delete and test a project's model
# endpoints (studio.access; the README's Roles).
PROJECT_CREATORS = ("staff", "staff-and-admins", "researchers", "everyone")
ENDPOINT_EDITORS = ("staff", "admins", "researchers")
STUDIO_PROJECT_CREATORS = (env_str("STUDIO_PROJECT_CREATORS") or "staff-and-admins").strip()
if STUDIO_PROJECT_CREATORS not in PROJECT_CREATORS:
    raise ConfigError(
        f"STUDIO_PROJECT_CREATORS={STUDIO_PROJECT_CREATORS!r} must be one of "
        f"{', '.join(PROJECT_CREATORS)}"
    )
STUDIO_ENDPOINT_EDITORS = (env_str("STUDIO_ENDPOINT_EDITORS") or "admins").strip()
if STUDIO_ENDPOINT_EDITORS not in ENDPOINT_EDITORS:
    raise ConfigError(
        f"STUDIO_ENDPOINT_EDITORS={STUDIO_ENDPOINT_EDITORS!r} must be one of "
        f"{', '.join(ENDPOINT_EDITORS)}"
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # no API token in a log line (the episode API takes it in the URL path); uvicorn's own
    # loggers get the same filter when the episode app is imported (studio.serving.log_redaction)
    "filters": {
        "redact_tokens": {"()": "studio.serving.log_redaction.RedactTokens"},
        # a 403/400/404 is one line, not a traceback
        "refusals": {"()": "studio.log_filters.RefusalsWithoutTraceback"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["redact_tokens", "refusals"]}
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # a line per model request would be most of a busy episodes worker's log
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # failures and lock-outs are warnings; its per-request notes are not wanted
        "axes": {"level": "WARNING"},
    },
}
