"""API keys at rest: encrypted with Fernet (AES-128-CBC + HMAC-SHA256, from `cryptography`)
under keys from the environment, so a copy of the database alone reveals no key.

STUDIO_ENCRYPTION_KEYS holds one or more Fernet keys, comma-separated: the first encrypts,
all decrypt (rotate by putting a new key first, then re-saving the endpoints). Unset, the key
is derived from SECRET_KEY with HKDF (documented in the README): changing SECRET_KEY then
makes stored API keys unreadable, and the endpoints say so."""

from __future__ import annotations

import base64
from functools import cache

from django.conf import settings


class SecretError(RuntimeError):
    """A stored secret cannot be read with the keys this process has."""


@cache
def _fernet():
    from cryptography.fernet import Fernet, MultiFernet
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    keys = list(settings.STUDIO_ENCRYPTION_KEYS)
    if not keys:
        derived = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"agentworld-studio api keys"
        ).derive(settings.SECRET_KEY.encode())
        keys = [base64.urlsafe_b64encode(derived).decode()]
    return MultiFernet([Fernet(k) for k in keys])


def encrypt(text: str) -> str:
    return _fernet().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    from cryptography.fernet import InvalidToken

    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SecretError(
            "the stored API key cannot be decrypted with this installation's keys "
            "(STUDIO_ENCRYPTION_KEYS or SECRET_KEY changed?): enter the key again"
        ) from None


def valid_key(key: str) -> bool:
    from cryptography.fernet import Fernet

    try:
        Fernet(key)
    except (ValueError, TypeError):
        return False
    return True


def _forget_keys(*, setting: str, **kwargs) -> None:
    if setting in ("STUDIO_ENCRYPTION_KEYS", "SECRET_KEY"):
        _fernet.cache_clear()


def connect_signals() -> None:
    from django.core.signals import setting_changed

    setting_changed.connect(_forget_keys, dispatch_uid="studio.secrets.forget_keys")
