#!/usr/bin/env bash
# Install and start AgentWorld Studio with its demo data on embedded defaults: SQLite in var/,
# a Celery worker (Redis when REDIS_URL is set or a local one answers, else kombu's filesystem
# transport in var/broker), no GPU and no model weights. Prints the URL and the demo logins.
#   PORT=8001 scripts/dev.sh          another port (default 8000)
#   STUDIO_BROKER=filesystem ...      use the embedded broker even if Redis is running
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PORT=${PORT:-8000}
HOST=${HOST:-127.0.0.1}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "dev.sh: needs Python 3.11 or newer as \$PYTHON (got: $("$PYTHON" --version 2>&1 || echo none))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "Creating the virtual environment in .venv ..."
  "$PYTHON" -m venv .venv
fi
# Reinstall only when the project's dependencies changed since the last run.
STAMP=.venv/.studio-installed
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  echo "Installing AgentWorld Studio and its dependencies into .venv ..."
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e .
  touch "$STAMP"
fi

export DEBUG=${DEBUG:-1}
export DJANGO_SETTINGS_MODULE=studio.settings
PY=.venv/bin/python
$PY manage.py migrate --noinput -v 0
$PY manage.py load_demo
$PY - <<'PY'
from django.conf import settings

db = settings.DATABASES["default"]
print(f"Database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}")
print(f"Broker:   {settings.BROKER_DESCRIPTION}")
PY

mkdir -p var
# One worker for the default and gpu queues (a gpu job without torch fails with a clear error),
# and one for the steps of episodes played by outside agents: a threads pool, each thread
# waiting on a model server's answer (STUDIO_EPISODE_THREADS at once).
$PY -m celery -A studio worker -Q default,gpu -c 2 -l INFO -n "jobs@%h" >var/worker.log 2>&1 &
WORKER=$!
$PY -m celery -A studio worker -Q episodes -P threads -c "${STUDIO_EPISODE_THREADS:-32}" \
  -l INFO -n "episodes@%h" >var/worker-episodes.log 2>&1 &
WORKER="$WORKER $!"
SERVER=""
cleanup() {
  trap - EXIT INT TERM
  echo "Stopping the studio ..."
  for pid in $SERVER $WORKER; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The server runs in the background so that Ctrl-C or a TERM to this script stops both
# processes. It is an ASGI server (uvicorn): the pages, and the episode API's WebSockets.
$PY -m uvicorn studio.asgi:application --host "${HOST}" --port "${PORT}" --log-level warning &
SERVER=$!
cat <<MSG

  AgentWorld Studio is starting at  http://${HOST}:${PORT}/
  Demo logins (password for all: demo-password):
    admin        what a researcher does, and members, models and API tokens
    researcher   imports, deletes, branches, simulates, builds worlds
    annotator    reads and annotates
  Worker logs: var/worker.log, var/worker-episodes.log     Stop with Ctrl-C.
  Shell commands, in another terminal (the same database and broker):
    DEBUG=1 .venv/bin/python manage.py worlds list --project Demo

MSG
wait "$SERVER"
