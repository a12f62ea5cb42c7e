-- proxy.lua: the wrk script of the benchmark campaign (bench/campaign).
--
-- wrk connects to the URL on its command line: the proxy under test, or the
-- origin itself for the "no proxy" column. This script decides what is sent
-- on those connections, from environment variables:
--
--   BENCH_TARGET  request target: absolute form "http://127.0.0.1:PORT/1k"
--                 through a proxy, origin form "/1k" straight to the origin
--   BENCH_HOST    Host header: the origin's host:port
--   BENCH_AUTH    Proxy-Authorization value ("Basic ..."); empty = none
--   BENCH_CLOSE   "1" adds "Connection: close": one request per connection
--                 (wrk reconnects after every response)
--
-- The request is formatted once per thread (wrk's default request()), so
-- the script costs nothing per request. done() prints one line starting
-- with "BENCH_JSON " that bench/report.ParseWrk reads.

local target = os.getenv("BENCH_TARGET")
if target == nil or target == "" then
   error("proxy.lua: BENCH_TARGET is not set")
end
wrk.method = "GET"
wrk.path = target
local host = os.getenv("BENCH_HOST")
if host ~= nil and host ~= "" then
   wrk.headers["Host"] = host
end
local auth = os.getenv("BENCH_AUTH")
if auth ~= nil and auth ~= "" then
   wrk.headers["Proxy-Authorization"] = auth
end
if os.getenv("BENCH_CLOSE") == "1" then
   wrk.headers["Connection"] = "close"
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"bytes":%d,"duration_us":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"latency_p50_us":%d,"latency_p99_us":%d,"latency_max_us":%d}\n',
      summary.requests, summary.bytes, summary.duration,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(99), latency.max))
end
