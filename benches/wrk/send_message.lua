-- wrk script: JSON-RPC SendMessage (A2A 1.0) with a fresh messageId per request.
-- Usage: wrk -t2 -c64 -d10s --latency -s benches/wrk/send_message.lua http://127.0.0.1:8080/
-- Set WRK_TEXT to change the message text (the conformance agent completes a task when
-- the messageId starts with "tck-complete-task"; WRK_PREFIX sets that prefix).
-- JSON-RPC errors come with HTTP 200, so check the outcome in the store afterwards
-- (ListTasks totalSize) rather than trusting wrk's non-2xx count alone.
local counter = 0
local text = os.getenv("WRK_TEXT") or "hello"
local prefix = os.getenv("WRK_PREFIX") or "wrk"

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"

request = function()
  counter = counter + 1
  local body = string.format(
    '{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":' ..
    '{"messageId":"%s-%d-%d","role":"ROLE_USER","parts":[{"text":"%s"}]}}}',
    counter, prefix, math.random(1, 1000000000), counter, text)
  return wrk.format(nil, "/", nil, body)
end
