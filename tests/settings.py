"""Test settings: the studio's settings with a fast password hasher.

Users are created in most fixtures; the production hasher (PBKDF2, ~0.7 s a user here) made
password hashing most of the suite's time. Everything else is the real configuration, read
from the environment as in production (DEBUG defaults to on so no SECRET_KEY is needed)."""

import os

os.environ.setdefault("DEBUG", "1")

from studio.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Two test runs in one checkout must not share an SQLite test database (each would drop the
# other's tables). Worker processes started by the tests get the file's path in DATABASE_URL.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(DATA_DIR / f"test-studio-{os.getpid()}.sqlite3")  # noqa: F405
    }
