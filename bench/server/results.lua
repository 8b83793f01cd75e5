-- wrk script: POST results for many trials at once. Each wrk thread owns a
-- disjoint range of trial ids and walks training_iteration upwards, so every
-- request is a new (trial, time value): each one is stored and committed,
-- none is answered from the idempotency index.
-- Environment: CTUNE_FIRST_TRIAL, CTUNE_NUM_TRIALS, CTUNE_LEASE (optional:
-- the X-Ctune-Lease fence, "W:A"), CTUNE_TOKEN (optional: the worker's own
-- secret from its registration reply, sent as Authorization: Bearer; the
-- shared worker token only registers; unset for an older build without tokens).
local first = tonumber(os.getenv("CTUNE_FIRST_TRIAL") or "1")
local ntrials = tonumber(os.getenv("CTUNE_NUM_TRIALS") or "1000")
local token = os.getenv("CTUNE_TOKEN")
local t_offset = tonumber(os.getenv("CTUNE_T_OFFSET") or "0")
local threads = {}
local counter = 1

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  nthreads = tonumber(os.getenv("CTUNE_WRK_THREADS") or "1")
  per = math.floor(ntrials / nthreads)
  base = first + id * per
  n = 0
  headers = {["Content-Type"] = "application/json"}
  if token then headers["Authorization"] = "Bearer " .. token end
  -- protocol v2: every trial-scoped write names its lease (all W:1 here)
  local lease = os.getenv("CTUNE_LEASE")
  if lease then headers["X-Ctune-Lease"] = lease end
end

function request()
  local trial = base + (n % per)
  local t = math.floor(n / per) + 1 + t_offset
  n = n + 1
  local body = string.format('{"training_iteration":%d,"loss":%.6f,"accuracy":%.6f}',
                             t, 1.0 / t + (trial % 7) * 0.01, 1.0 - 1.0 / (t + 1))
  return wrk.format("POST", "/api/v1/trials/" .. trial .. "/results", headers, body)
end

bad = 0
function response(status, headers, body)
  -- FIFO without max_t never stops a running trial: a "stop" means the
  -- result was not stored (the trial was no longer running), so it counts.
  if status ~= 200 or not string.find(body, '"continue"', 1, true) then bad = bad + 1 end
end

function done(summary, latency, requests)
  local total_bad = 0
  for _, t in ipairs(threads) do total_bad = total_bad + (t:get("bad") or 0) end
  io.write(string.format("ctune: requests=%d bad=%d p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
                         summary.requests, total_bad, latency:percentile(50) / 1000,
                         latency:percentile(90) / 1000, latency:percentile(99) / 1000,
                         latency.max / 1000))
end
