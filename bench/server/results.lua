-- wrk script: POST results for many trials at once. Each wrk thread owns a
-- disjoint range of trial ids and walks training_iteration upwards, so every
-- request is a new (trial, time value): each one is stored and committed,
-- none is answered from the idempotency index.
-- Environment: CTUNE_FIRST_TRIAL, CTUNE_NUM_TRIALS, CTUNE_LEASE (optional:
-- the X-Ctune-Lease fence, "W:A"), CTUNE_TOKEN (optional: the worker's own
-- secret from its registration reply, sent as Authorization: Bearer; the
-- shared worker token only registers; unset for an older build without tokens).
-- The client shares the server's 2 cores, so it is kept cheap: the request's
-- fixed head is built once, and no response() callback (wrk then parses no
-- headers or body into Lua): a non-2xx answer counts as bad (wrk's own
-- count), and a result answered 200 "stop" is one that was not stored, which
-- bench_results.py sees when it counts the rows in SQLite.
local first = tonumber(os.getenv("CTUNE_FIRST_TRIAL") or "1")
local ntrials = tonumber(os.getenv("CTUNE_NUM_TRIALS") or "1000")
local token = os.getenv("CTUNE_TOKEN")
local t_offset = tonumber(os.getenv("CTUNE_T_OFFSET") or "0")
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  nthreads = tonumber(os.getenv("CTUNE_WRK_THREADS") or "1")
  per = math.floor(ntrials / nthreads)
  base = first + id * per
  n = 0
  -- protocol v2: every trial-scoped write names its lease (all W:1 here)
  local h = "Host: " .. wrk.headers["Host"] .. "\r\nContent-Type: application/json\r\n"
  if token then h = h .. "Authorization: Bearer " .. token .. "\r\n" end
  local lease = os.getenv("CTUNE_LEASE")
  if lease then h = h .. "X-Ctune-Lease: " .. lease .. "\r\n" end
  head = h
end

local fmt = string.format
-- every request a new (trial, time value)
function request()
  local trial = base + (n % per)
  local t = math.floor(n / per) + 1 + t_offset
  n = n + 1
  local body = fmt('{"training_iteration":%d,"loss":%.6f,"accuracy":%.6f}',
                   t, 1.0 / t + (trial % 7) * 0.01, 1.0 - 1.0 / (t + 1))
  return fmt("POST /api/v1/trials/%d/results HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s",
             trial, head, #body, body)
end

function done(summary, latency, requests)
  io.write(string.format("ctune: requests=%d bad=%d p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
                         summary.requests, summary.errors.status, latency:percentile(50) / 1000,
                         latency:percentile(90) / 1000, latency:percentile(99) / 1000,
                         latency.max / 1000))
end
