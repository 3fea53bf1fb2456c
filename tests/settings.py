"""Test settings: the studio's settings with a fast password hasher and no model from the
developer's environment.

Users are created in most fixtures; the production hasher (PBKDF2, ~0.7 s a user here) made
password hashing most of the suite's time. Everything else is the real configuration, read
from the environment as in production (DEBUG defaults to on so no SECRET_KEY is needed)."""

import os

os.environ.setdefault("DEBUG", "1")
# The models a project is seeded with come from these: a developer's own configuration must
# not change what the tests see (removed here, so worker processes started by the tests do
# not see them either; tests that need them set them).
for _name in (
    "WORLD_MODEL_BACKEND",
    "WORLD_MODEL_BASE_URL",
    "WORLD_MODEL_NAME",
    "WORLD_MODEL_PATH",
    "WORLD_MODEL_API_KEY",
    "AGENT_MODEL_BASE_URL",
    "AGENT_MODEL_NAME",
    "AGENT_MODEL_API_KEY",
    "STUDIO_ENDPOINT_KEY_ENVS",
):
    os.environ.pop(_name, None)

# Under pytest-xdist (-n 2) each worker process has a test database of its own (pytest-django
# suffixes its name with the worker's id), so rows of the same id exist in both: the files
# named by them (uploads, exports, archives, models) need a data directory of their own too.
# Set in the environment so the workers and servers the tests start write there as well; a
# process they start (which inherits PYTEST_XDIST_WORKER and this module) keeps the directory
# it is given, which may be one a test chose.
if (_xdist := os.environ.get("PYTEST_XDIST_WORKER")) and not os.environ.get(
    "STUDIO_TEST_DATA_DIR_OF"
):
    _base = os.environ.get("STUDIO_DATA_DIR") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "var"
    )
    os.environ["STUDIO_DATA_DIR"] = os.path.join(_base, f"xdist-{_xdist}")
    os.environ["STUDIO_TEST_DATA_DIR_OF"] = _xdist

from studio.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Two test runs in one checkout must not share an SQLite test database (each would drop the
# other's tables). Worker processes started by the tests get the file's path in DATABASE_URL.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(DATA_DIR / f"test-studio-{os.getpid()}.sqlite3")  # noqa: F405
    }
