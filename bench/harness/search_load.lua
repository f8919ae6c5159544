-- wrk script for bench/serving/load_bench.py: POST /search with real queries, round robin, a request cap.
-- Bodies come one JSON document per line from the file named by the BODIES environment variable;
-- MAX_REQUESTS (per wrk thread) stops a thread early so a cell is bounded by count as well as time.

local bodies = {}
for line in io.lines(os.getenv("BODIES")) do
  bodies[#bodies + 1] = line
end
local max_requests = tonumber(os.getenv("MAX_REQUESTS") or "0")
local counter = 0
local answered = 0
local not_ok = 0

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

-- METHOD=GET: each line is a path with its query string (txtai's GET /search?query=...)
local get = os.getenv("METHOD") == "GET"

function request()
  counter = counter + 1
  local line = bodies[(counter % #bodies) + 1]
  if get then
    return wrk.format("GET", line, {}, nil)
  end
  return wrk.format(nil, "/search", nil, line)
end

function response(status, headers, body)
  answered = answered + 1
  if status ~= 200 then
    not_ok = not_ok + 1
  end
  if max_requests > 0 and answered >= max_requests then
    wrk.thread:stop()
  end
end

-- one JSON line the Python side parses: latencies in microseconds
function done(summary, latency, requests)
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "non_2xx": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
