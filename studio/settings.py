"""The one settings module: everything configurable comes from the environment (see README)."""

from __future__ import annotations

import os
from pathlib import Path

from inference.simulation.limits import BACKENDS, DEFAULT_WORLD_MODEL, OFFLINE_BACKEND
from studio.env import (
    ConfigError,
    choose_broker,
    env_bool,
    env_int,
    env_key_bindings,
    env_list,
    env_str,
    parse_database_url,
)

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
    "studio",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
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

DATABASES = {
    "default": parse_database_url(
        env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'studio.sqlite3'}") or ""
    )
}
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

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Serve straight from static/ (no collectstatic needed) in development and tests.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
MEDIA_ROOT = DATA_DIR / "uploads"
MEDIA_ROOT.mkdir(parents=True, exist_ok=True)
FILE_UPLOAD_TEMP_DIR = None
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
STUDIO_MAX_UPLOAD_BYTES = env_int("STUDIO_MAX_UPLOAD_MB", 512, minimum=1) * 1024 * 1024

SESSION_COOKIE_SECURE = not DEBUG and env_bool("SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "SAMEORIGIN"

# ---- Celery -----------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL") or None
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS, BROKER_DESCRIPTION = choose_broker(
    REDIS_URL, str(DATA_DIR)
)
# The longest job we allow; the broker must not redeliver a job that is still running.
STUDIO_JOB_HARD_LIMIT_S = env_int("STUDIO_JOB_HARD_LIMIT_S", 3600, minimum=6)
# The soft limit lets a job stop itself and say why before the hard kill.
STUDIO_JOB_SOFT_LIMIT_S = max(STUDIO_JOB_HARD_LIMIT_S // 2, STUDIO_JOB_HARD_LIMIT_S - 30)
# A job whose worker died is marked failed ("worker lost") within this many seconds by the
# sweeper every worker runs (see studio.jobs.runtime for the heartbeat and sweep periods).
STUDIO_JOB_STALE_S = env_int("STUDIO_JOB_STALE_S", 120, minimum=2)
if CELERY_BROKER_URL.startswith(("redis", "unix")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": STUDIO_JOB_HARD_LIMIT_S + 600}
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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # a line per model request would be most of a busy episodes worker's log
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
