#!/usr/bin/env bash
# The README's main job: fine-tune on the dataset, publish the bundle, then serve it with a job worker.
# Usage: scripts/demo.sh DATA_DIR RUN_DIR HOST PORT   (make demo passes the defaults)
set -euo pipefail
data=${1:-../shared/data/scifact}
run_dir=${2:-var}
host=${3:-127.0.0.1}
port=${4:-8000}
py=.venv/bin/python

if [ ! -f "$data/corpus.jsonl" ]; then
    echo "demo: no dataset at $data (expected a BEIR folder: corpus.jsonl, queries.jsonl, qrels/)" >&2
    exit 2
fi
mkdir -p "$run_dir"
export SEARCH_BUNDLES_DIR="$run_dir/bundles"
export SEARCH_QUEUE_URL="sqlite:///$run_dir/jobs.db"
export SEARCH_DATA_ROOT="$(dirname "$data")"   # jobs may name any dataset beside this one

echo "== 1/3 train → report → index → publish (about 10 minutes on 2 CPU cores)"
"$py" -m training pipeline --data "$data" --bundles "$SEARCH_BUNDLES_DIR" --work-dir "$run_dir/runs"

echo "== 2/3 job worker (retrain / reindex jobs), log in $run_dir/worker.log"
"$py" -m training worker >"$run_dir/worker.log" 2>&1 &
worker=$!
trap 'kill $worker 2>/dev/null || true' EXIT INT TERM

echo "== 3/3 API on http://$host:$port  (try: curl -s $host:$port/generalization-gap; Ctrl-C stops)"
"$py" -m uvicorn --factory app.main:create_app --host "$host" --port "$port"
