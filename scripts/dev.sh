#!/usr/bin/env bash
# Install and start AgentWorld Studio with its demo data on embedded defaults: SQLite in var/,
# Celery workers (Redis when REDIS_URL is set or a local one answers, else the embedded SQLite
# broker in var/broker.sqlite3), no GPU and no model weights. Prints the URL and the demo
# logins. A worker that exits is started again (said on the terminal and in its log).
#   PORT=8001 scripts/dev.sh              another port (default 8000)
#   STUDIO_BROKER=sqlite scripts/dev.sh   the embedded broker even if Redis is running
#   STUDIO_DATA_DIR=/tmp/x scripts/dev.sh another data dir (database, broker, logs)
#   STUDIO_EXTRAS=model scripts/dev.sh    also the `model` extra (torch's CPU build,
#                                         transformers, trl, peft): the gpu worker then runs the
#                                         tiny model in-process and fine-tunes it
# What it chose (database, broker) is recorded in the data dir (dev-runtime.json) while it
# runs: manage.py and workers started in another terminal use the same.
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
# Reinstall only when the project's dependencies or the extras asked for changed since the
# last run (the stamp holds the extras it installed).
EXTRAS=${STUDIO_EXTRAS:-}
case "$EXTRAS" in
  ""|model|gpu) ;;
  *) echo "dev.sh: STUDIO_EXTRAS must be empty, model or gpu (got: $EXTRAS)" >&2; exit 1 ;;
esac
SPEC=.
[ -n "$EXTRAS" ] && SPEC=".[$EXTRAS]"
STAMP=.venv/.studio-installed
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ "$(cat "$STAMP")" != "$EXTRAS" ]; then
  echo "Installing AgentWorld Studio${EXTRAS:+ with the $EXTRAS extra} and its dependencies into .venv ..."
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e "$SPEC"
  printf '%s' "$EXTRAS" > "$STAMP"
fi

export DEBUG=${DEBUG:-1}
export DJANGO_SETTINGS_MODULE=studio.settings
PY=.venv/bin/python
DATA_DIR=${STUDIO_DATA_DIR:-var}
mkdir -p "$DATA_DIR"
RUNTIME="$DATA_DIR/dev-runtime.json"

# Choose the database and broker once, record them for other terminals, and give them to
# every process started here as explicit settings: a worker restarted an hour later uses
# the same broker even if Redis came or went meanwhile.
CHOICE=$(DEV_PID=$$ $PY - <<'PY'
import os
import shlex

from django.conf import settings

from studio.env import write_dev_runtime

url = settings.CELERY_BROKER_URL
write_dev_runtime(
    str(settings.DATA_DIR),
    pid=int(os.environ["DEV_PID"]),
    database_url=settings.DATABASE_URL,
    broker_url=url,
    description=settings.BROKER_DESCRIPTION,
)
print(f"export DATABASE_URL={shlex.quote(settings.DATABASE_URL)}")
if url.startswith(("redis://", "rediss://", "unix://")):
    print(f"export REDIS_URL={shlex.quote(url)}")
else:
    print(f"export STUDIO_BROKER={'sqlite' if url.startswith('sqlite:') else 'filesystem'}")
db = settings.DATABASES["default"]
print(f"echo {shlex.quote('Database: ' + db['ENGINE'].rsplit('.', 1)[-1] + ' ' + str(db['NAME']))}")
print(f"echo {shlex.quote('Broker:   ' + settings.BROKER_DESCRIPTION)}")
PY
)
eval "$CHOICE"

SUPERVISORS=""
SERVER=""
cleanup() {
  trap - EXIT INT TERM
  echo "Stopping the studio ..."
  for pid in $SERVER $SUPERVISORS; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # the record is ours only while it names this script
  if grep -q "\"pid\": $$," "$RUNTIME" 2>/dev/null; then rm -f "$RUNTIME"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The scripted demo agent and world (rules, not models: `manage.py demo_models`), so the
# demo's campaigns and episodes run without weights; load_demo adds their endpoints.
DEMO_MODELS_PORT=${STUDIO_DEMO_MODELS_PORT:-$((PORT + 100))}
export STUDIO_DEMO_MODELS_URL="http://127.0.0.1:${DEMO_MODELS_PORT}/v1"

$PY manage.py migrate --noinput -v 0
$PY manage.py load_demo

# Run a worker and start it again whenever it exits (killed, out of memory, a crash): one
# worker's death must never leave jobs waiting for ever. A worker that keeps dying at once
# (a configuration error) is started again ever less often, up to every 30 s. TERM stops
# the worker (a warm shutdown: it finishes what it runs) and this loop.
supervise() {
  local name=$1 log=$2
  shift 2
  local child="" rc=0 started=0 delay=1
  trap 'if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi; exit 0' TERM
  while :; do
    started=$SECONDS
    "$@" >>"$log" 2>&1 &
    child=$!
    rc=0
    wait "$child" || rc=$?
    if [ $((SECONDS - started)) -ge 30 ]; then delay=1; fi
    local line
    line="dev.sh: the $name worker (pid $child) exited with status $rc at $(date '+%H:%M:%S'); starting it again in ${delay} s"
    echo "$line" >>"$log"
    echo "$line (log: $log)" >&2
    sleep "$delay"
    delay=$((delay * 2 > 30 ? 30 : delay * 2))
  done
}

# One worker for the default queue (imports, simulations); one for the gpu queue (in-process
# models) on a threads pool: one model in the process, shared by its threads, whose episode
# steps go as one engine call (STUDIO_GPU_THREADS at once; a gpu job without torch fails with
# a clear error); and one for the steps of episodes played by outside agents: a threads pool,
# each thread waiting on a model server's answer (STUDIO_EPISODE_THREADS at once).
supervise jobs "$DATA_DIR/worker.log" \
  $PY -m celery -A studio worker -Q default -c 2 -l INFO -n "jobs@%h" &
SUPERVISORS=$!
supervise gpu "$DATA_DIR/worker-gpu.log" \
  $PY -m celery -A studio worker -Q gpu -P threads -c "${STUDIO_GPU_THREADS:-4}" \
  -l INFO -n "gpu@%h" &
SUPERVISORS="$SUPERVISORS $!"
supervise episodes "$DATA_DIR/worker-episodes.log" \
  $PY -m celery -A studio worker -Q episodes -P threads -c "${STUDIO_EPISODE_THREADS:-32}" \
  -l INFO -n "episodes@%h" &
SUPERVISORS="$SUPERVISORS $!"
supervise demo-models "$DATA_DIR/demo-models.log" \
  $PY manage.py demo_models --port "$DEMO_MODELS_PORT" &
SUPERVISORS="$SUPERVISORS $!"

# The server runs in the background so that Ctrl-C or a TERM to this script stops both
# processes. It is an ASGI server (uvicorn, started by scripts/web.sh as in the image): the
# pages, and the episode API's WebSockets. No proxy is believed unless STUDIO_TRUSTED_PROXIES
# names it, so a client's X-Forwarded-For never picks the address the sign-in lock-out counts.
PY="$PY" scripts/web.sh --host "${HOST}" --port "${PORT}" --log-level warning &
SERVER=$!
IN_DIR=""
if [ -n "${STUDIO_DATA_DIR:-}" ]; then IN_DIR="STUDIO_DATA_DIR=$STUDIO_DATA_DIR "; fi
cat <<MSG

  AgentWorld Studio is starting at  http://${HOST}:${PORT}/
  Demo logins (password for all: demo-password):
    admin        what a researcher does, and members, models and API tokens
    researcher   imports, deletes, branches, simulates, builds worlds
    annotator    reads and annotates
  Worker logs: $DATA_DIR/worker.log (default queue), $DATA_DIR/worker-gpu.log (gpu),
  $DATA_DIR/worker-episodes.log (episodes); a worker that exits is started again.
  Scripted demo models (stand-ins for an agent, a world model, a judge and an embeddings
  model, not models) at $STUDIO_DEMO_MODELS_URL (log: $DATA_DIR/demo-models.log): the Demo
  project's "Scripted demo agent", "... world", "... judge" and "... embeddings" on the
  Models page.
  Stop with Ctrl-C.
  Shell commands, in another terminal, use the same database and broker (recorded in
  $RUNTIME while this runs):
    ${IN_DIR}DEBUG=1 .venv/bin/python manage.py worlds list --project Demo

MSG
wait "$SERVER"
