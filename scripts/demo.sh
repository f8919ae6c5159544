#!/usr/bin/env bash
# The README's main job: fine-tune on the dataset, publish the bundle, then serve it with a job worker.
# Usage: scripts/demo.sh [DATA] RUN_DIR HOST PORT   (make demo passes the defaults)
# DATA empty: build the demo datasets from this Python's standard-library docstrings (nothing to download)
# and two collections, each with its own fine-tuned encoder: `default` (a sample of the whole standard
# library) and `net` (the networking and e-mail packages only), side by side on one server.
# The API key (SEARCH_API_KEY: activate, roll back, jobs, document writes) is generated on the first run,
# printed once and kept in RUN_DIR/api-key (mode 0600); later runs reuse it. A SEARCH_API_KEY already in
# the environment wins and is not written anywhere.
set -euo pipefail
data=${1:-}
run_dir=${2:-var}
host=${3:-127.0.0.1}
port=${4:-8000}
py=.venv/bin/python
started=${DEMO_STARTED_AT:-$(date +%s)}  # make demo sets it before its install
mkdir -p "$run_dir"
train_opts=()
family=""  # the demo's second collection: one package family of the standard library
NET_MODULES=email,http,urllib,smtplib,imaplib,poplib,ftplib,xmlrpc,socket,socketserver,wsgiref,telnetlib,ssl,mailbox,nntplib,mimetypes,smtpd

if [ -z "$data" ]; then
    data="$run_dir/data/pydocs"
    family="$run_dir/data/pydocs-net"
    echo "== 0/3 demo datasets: Python standard-library docstrings → $data, and its networking packages → $family (BEIR format, see their README.md)"
    "$py" -m training demo-data --out "$data"
    "$py" -m training demo-data --out "$family" --modules "$NET_MODULES" --docs 289 --test-queries 70
    # one epoch, in-batch negatives only, 64-token training inputs: the demo reaches a serving API in
    # minutes on 2 CPU cores and still gains clearly over the base model (bench/serving/demo_bench.py, docs/benchmarks.md).
    # Its 64 short texts a step fit without GradCache: 2.2 s and 2.1 GB a step vs 2.9 s and 1.4 GB with
    # it (bench/training/train_step_cost.py --data <demo> --cells 'demo recipe,demo recipe no gradcache')
    train_opts=(--epochs 1 --hard-negatives 0 --max-seq-length 64 --no-grad-cache)
elif [ ! -f "$data/corpus.jsonl" ] && [ ! -f "$data" ]; then
    echo "demo: no dataset at $data (expected a BEIR folder: corpus.jsonl, queries.jsonl, qrels/; or a pairs JSONL file)" >&2
    exit 2
fi
key_file="$run_dir/api-key"
key_note=""
key_ref="\$(cat $key_file)"
if [ -n "${SEARCH_API_KEY:-}" ]; then
    key_note="API key: the SEARCH_API_KEY of your environment"
    key_ref="\$SEARCH_API_KEY"
elif [ -s "$key_file" ]; then
    SEARCH_API_KEY=$(cat "$key_file")
    key_note="API key: the one generated on the first run, in $key_file (cat it)"
else
    # 32 random bytes, URL-safe; written under umask 077 so the file is never readable by others
    SEARCH_API_KEY=$("$py" -c 'import secrets; print(secrets.token_urlsafe(32))')
    (umask 077 && printf '%s\n' "$SEARCH_API_KEY" >"$key_file.tmp" && mv "$key_file.tmp" "$key_file")
    echo "== API key generated (shown this once; kept in $key_file, mode 0600, reused by the next make demo):"
    echo "   $SEARCH_API_KEY"
    key_note="API key: printed above, kept in $key_file"
fi
export SEARCH_API_KEY
export SEARCH_BUNDLES_DIR="$run_dir/bundles"
export SEARCH_QUEUE_URL="sqlite:///$run_dir/jobs.db"
export SEARCH_DATA_ROOT="$(dirname "$data")"   # jobs may name any dataset beside this one

echo "== 1/3 train → report → index → publish (phase times are printed at the end)"
# --no-distill: the static query tower (the cheapest query encoder `auto` can serve) is distilled after
# the first answer instead, in the background: it was 68 s of the 212 s pipeline before the first answer
# (make demo-check, issue 44); until it is live, `auto` serves the full model or its ONNX export.
"$py" -m training pipeline --data "$data" --bundles "$SEARCH_BUNDLES_DIR" --work-dir "$run_dir/runs" \
    --no-distill ${train_opts[@]+"${train_opts[@]}"}

echo "== 2/3 job worker (retrain / reindex jobs), log in $run_dir/worker.log"
"$py" -m training worker --nice 10 >"$run_dir/worker.log" 2>&1 &   # jobs yield the cores to searches
worker=$!

# The first answer, then what can wait: the static query tower of the first collection (a new version of
# it, through the gate), then the second collection `net`, in the background at nice 10, so neither delays
# the first answer (issue 44: two trainings in a row put it minutes later). The time printed counts from
# `make demo`'s start (DEMO_STARTED_AT), install included.
after_first_answer() {
    local child=""
    # every background child of this function, not only "$child": a TERM between a child's start and
    # `child=$!` left the poller running (and holding the demo's output open)
    trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM
    "$py" -c 'import json, sys, time, urllib.request
body = json.dumps({"query": "open a file", "top_k": 1}).encode()
while True:
    try:
        request = urllib.request.Request(sys.argv[1], body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            if answer.status == 200:
                break
    except OSError:
        pass
    time.sleep(1)' "http://$host:$port/search" &
    child=$!
    wait "$child" || return 0
    echo "== first answer after $(($(date +%s) - started)) s (POST /search answered; counted from the start of make demo)"
    echo "== 1a/3 the static query tower trains now in the background, log in $run_dir/distill.log"
    nice -n 10 "$py" -m training distill --data "$data" --bundles "$SEARCH_BUNDLES_DIR" --variants static \
        >"$run_dir/distill.log" 2>&1 &
    child=$!
    if wait "$child"; then
        echo "== static query tower: $(tail -n 1 "$run_dir/distill.log")"  # VERSION: live (reason)
    else
        echo "== no static query tower (search serves the full model; see $run_dir/distill.log)" >&2
    fi
    if [ -n "$family" ]; then
        echo "== 1b/3 collection 'net' (its own encoder, gate and report) trains now in the background, log in $run_dir/net.log"
        nice -n 10 "$py" -m training pipeline --data "$family" --collection net --work-dir "$run_dir/runs" \
            ${train_opts[@]+"${train_opts[@]}"} >"$run_dir/net.log" 2>&1 &
        child=$!
        if wait "$child"; then
            echo "== collection 'net' is live: /collections/net/search, or pick it at the top of the page"
        else
            echo "== collection 'net' did not build: see $run_dir/net.log" >&2
        fi
    fi
}
after_first_answer &
waiter=$!
trap 'kill $worker $waiter 2>/dev/null || true' EXIT INT TERM

echo "== 3/3 API on http://$host:$port  (open http://$host:$port/ in a browser; once 'net' is live, pick it at the top, or: curl -s $host:$port/collections/net/generalization-gap; Ctrl-C stops)"
echo "   $key_note. Paste it into the page's 'API key' box (top right) to activate, roll back, submit jobs and"
echo "   write documents, or send it: curl -H \"X-API-Key: $key_ref\" … (see docs/getting-started.md)"
"$py" -m app.serve --host "$host" --port "$port"   # workers and threads chosen for this machine
