"""Which hosts a model endpoint may point at. Any project member who may edit endpoints types
their base URL, and the web process and the workers then send requests there: without a
limit, an endpoint at an internal address makes the studio's own processes reach hosts of
its network (and Test would report what answers on which port). So a base URL is checked
when an endpoint is saved, and again before every request a process sends to one.

The allowlist is the hosts of the model URLs the operator put in the environment
(WORLD_MODEL_BASE_URL, AGENT_MODEL_BASE_URL, the URLs of STUDIO_ENDPOINT_KEY_ENVS and
STUDIO_DEMO_MODELS_URL) plus STUDIO_ENDPOINT_ALLOWED_HOSTS (default: loopback). An entry is a
host name (it matches that name, without resolving it), an IP address, a CIDR network, or
`*` for any host. A host not listed by name is resolved when the allowlist holds networks,
and every address it resolves to must be in one of them (a name that resolves to an internal
address as well is refused).

Django-free at import time (studio.settings parses the setting with `parse_allowed_hosts`)."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from studio.env import ConfigError

SETTING = "STUDIO_ENDPOINT_ALLOWED_HOSTS"
DEFAULT_ALLOWED_HOSTS = ["localhost", "127.0.0.0/8", "::1"]
ANY_HOST = "*"
# where `manage.py demo_models` serves (scripts/dev.sh sets it; load_demo reads it the same way)
DEMO_MODELS_ENV = "STUDIO_DEMO_MODELS_URL"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# a DNS name: letters, digits, hyphens and underscores in dot-separated labels
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


class HostNotAllowed(Exception):
    """A URL whose host is not on the allowlist; the message names the host and the setting."""


def parse_allowed_hosts(name: str, entries: Iterable[str]) -> list[str]:
    """The entries of the setting `name`, normalised (names lower-case, networks in CIDR
    form); ConfigError naming the entry for one that is no host name, address or network."""
    out = []
    for raw in entries:
        entry = raw.strip().lower().rstrip(".")
        if entry == ANY_HOST:
            out.append(entry)
            continue
        try:
            network = ipaddress.ip_network(entry.strip("[]"), strict=True)
        except ValueError as exc:
            if "/" in entry or ":" in entry or re.fullmatch(r"[0-9.]+", entry):
                raise ConfigError(
                    f"{name}: {raw.strip()!r} is not an IP address or CIDR network ({exc})"
                ) from None
            if not _HOST_NAME.match(entry):
                raise ConfigError(
                    f"{name}: {raw.strip()!r} is not a host name, an IP address, a CIDR "
                    "network (e.g. 10.0.0.0/8) or * (any host)"
                ) from None
            out.append(entry)
        else:
            # one address reads as itself (127.0.0.1, ::1), a network in CIDR form
            out.append(str(network.network_address if network.num_addresses == 1 else network))
    return out


@dataclass(frozen=True)
class Allowlist:
    any_host: bool
    names: frozenset[str]
    networks: tuple[Network, ...]
    shown: tuple[str, ...]  # what a refusal lists

    def allows_address(self, address: Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
        return any(address in network for network in self.networks)


def _environment_urls() -> list[str]:
    from django.conf import settings

    urls = [settings.WORLD_MODEL_BASE_URL, settings.AGENT_MODEL_BASE_URL]
    urls += [url for _, url in settings.STUDIO_ENDPOINT_KEY_ENVS]
    urls.append(os.environ.get(DEMO_MODELS_ENV, ""))
    return [u.strip() for u in urls if u and u.strip()]


_cache: dict[tuple, Allowlist] = {}


def allowlist() -> Allowlist:
    """STUDIO_ENDPOINT_ALLOWED_HOSTS plus the hosts of the environment's model URLs, read
    now (tests change the settings; parsing is cached per value)."""
    from django.conf import settings

    configured = tuple(getattr(settings, SETTING, DEFAULT_ALLOWED_HOSTS))
    env_hosts = []
    for url in _environment_urls():
        host = urlsplit(url).hostname
        if host:
            env_hosts.append(host.rstrip("."))
    key = (configured, tuple(env_hosts))
    found = _cache.get(key)
    if found is not None:
        return found
    entries = list(configured)
    for host in env_hosts:
        try:
            entries += parse_allowed_hosts("the environment's model URLs", [host])
        except ConfigError:
            continue  # an odd host there matches nothing rather than failing every request
    names: set[str] = set()
    networks: list[Network] = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError:
            names.add(entry)
    shown = tuple(dict.fromkeys(entries))
    made = Allowlist(ANY_HOST in names, frozenset(names - {ANY_HOST}), tuple(networks), shown)
    if len(_cache) > 64:
        _cache.clear()
    _cache[key] = made
    return made


def host_of(url: str) -> str:
    """The host a request to `url` goes to, lower-case; HostNotAllowed for a URL that is no
    plain http(s)://host[:port]/path (credentials in it, or characters clients read apart)."""
    parts = urlsplit(url.strip())
    netloc = parts.netloc
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise HostNotAllowed(f"{url!r} is not an http:// or https:// URL with a host")
    if "@" in netloc or "\\" in netloc or any(c.isspace() for c in netloc):
        # user:password@ (or a backslash) is read differently by different clients: the
        # host one checks must be the host the other connects to
        raise HostNotAllowed(
            f"{url!r}: a base URL may not hold user:password@ or backslashes; give the key "
            "in the API key field"
        )
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise HostNotAllowed(f"{url!r} has a port that is not a number") from None
    return parts.hostname.rstrip(".").lower()


def _refusal(host: str, url: str, allowed: Allowlist) -> HostNotAllowed:
    listed = ", ".join(allowed.shown) or "none"
    return HostNotAllowed(
        f"the host {host!r} of {url} is not one model endpoints may reach: the operator "
        f"lists those in {SETTING} (allowed now: {listed}; a name not listed must resolve "
        "only to addresses in the networks listed)"
    )


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _by_name_or_literal(host: str, url: str, allowed: Allowlist) -> bool | None:
    """True: allowed without resolving; None: `host` must be resolved and its addresses
    checked. Raises the refusal when nothing can allow it."""
    if allowed.any_host or host in allowed.names:
        return True
    literal = _literal(host)
    if literal is not None:
        if allowed.allows_address(literal):
            return True
        raise _refusal(host, url, allowed)
    if not allowed.networks:
        raise _refusal(host, url, allowed)
    return None


Resolver = Callable[[str], list[str]]


def _resolve(host: str) -> list[str]:
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _check_resolved(host: str, url: str, addresses: list[str], allowed: Allowlist) -> list[str]:
    # a scoped IPv6 address is written fe80::1%eth0
    parsed = [_literal(a.split("%", 1)[0]) for a in addresses]
    if not parsed or any(a is None or not allowed.allows_address(a) for a in parsed):
        raise _refusal(host, url, allowed)
    return addresses


def check_url(url: str, *, resolve: Resolver = _resolve) -> list[str] | None:
    """Raise HostNotAllowed unless `url`'s host is on the allowlist. Returns the checked
    addresses the host resolved to (connect to these, not to the name resolved again), or
    None when it is allowed as it is (by name, an allowed literal address, or `*`)."""
    host = host_of(url)
    allowed = allowlist()
    if _by_name_or_literal(host, url, allowed):
        return None
    try:
        addresses = resolve(host)
    except (OSError, UnicodeError):
        raise _refusal(host, url, allowed) from None
    return _check_resolved(host, url, addresses, allowed)


def refusal(url: str) -> str | None:
    """Why `url` may not be an endpoint's base URL, or None: for forms and job pages."""
    try:
        check_url(url)
    except HostNotAllowed as exc:
        message = str(exc)
        return message[0].upper() + message[1:]
    return None


async def addresses_to_connect(url: str) -> list[str] | None:
    """`check_url` for an event loop: the name is resolved by the loop's resolver (in its
    thread pool), never blocking the loop."""
    host = host_of(url)
    allowed = allowlist()
    if _by_name_or_literal(host, url, allowed):
        return None
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise _refusal(host, url, allowed) from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    return _check_resolved(host, url, addresses, allowed)
