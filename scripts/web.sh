#!/usr/bin/env bash
# The studio's web server, the one way it is started (scripts/dev.sh, the Dockerfile's CMD):
# uvicorn serving studio.asgi:application, with the arguments given (--host, --port, ...).
# X-Forwarded-For and X-Forwarded-Proto are believed only on connections from an address in
# STUDIO_TRUSTED_PROXIES (comma-separated addresses or networks: the proxy in front). Empty,
# the default, believes nobody: uvicorn's own default trusts 127.0.0.1, so any local client
# (or a proxy on the same host that passes the client's header on) could pick the address
# the sign-in lock-out counts. The settings refuse a value that is not addresses/networks.
#   PY=.venv/bin/python scripts/web.sh --host 127.0.0.1 --port 8000
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
PROXIES=${STUDIO_TRUSTED_PROXIES:-}
PROXIES=${PROXIES//[[:space:]]/}
if [ -n "$PROXIES" ]; then
  exec "$PY" -m uvicorn studio.asgi:application --proxy-headers --forwarded-allow-ips "$PROXIES" "$@"
fi
exec "$PY" -m uvicorn studio.asgi:application --no-proxy-headers "$@"
