"""benches/upgrade/check.py — an upgrade checked end to end: one build of `agent-a2a`
writes a store, another opens it (running its migrations) and must read and continue
everything the first wrote.

    python3 benches/upgrade/check.py OLD_BINARY NEW_BINARY sqlite|postgres

The old build, with its default agent (tool routing over the memory skill), writes a
task waiting for input and its history, a direct tool call (a memory and a tool call in
the history), a push config whose receiver refuses while the old build runs (so
deliveries stay owed in the outbox), a follow-up (events in the task's log), and the
idempotency claims of its messages. The new build must read the tasks, list them, show
the push config, answer a retry of an old message id from its claim, find the memory,
commit a follow-up to the old task, replay the task's log from its start, and make the
deliveries the old build owed. Postgres: a database `a2a_upgrade_check` at
postgres://postgres@127.0.0.1:5432, dropped after. Ports 9481 (server) and 9482
(receiver) on 127.0.0.1.
"""
import json, os, subprocess, sys, time, urllib.request, socket, threading, http.server

OLD, NEW, STORE = sys.argv[1], sys.argv[2], sys.argv[3]   # STORE: sqlite | postgres
PORT = 9481
DATA = f"/tmp/upgrade-{STORE}"
PG = "postgres://postgres@127.0.0.1:5432"
DB = "a2a_upgrade_check"
subprocess.run(["rm", "-rf", DATA]); os.makedirs(DATA)
env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_A2A__") and k != "DATABASE_URL"}
env.update({"RUST_LOG": "warn", "AGENT_A2A__AUTH__ENABLED": "false", "AGENT_A2A__PUSH__ALLOW_LOOPBACK": "true"})
if STORE == "postgres":
    subprocess.run(["psql", "-q", "-X", f"{PG}/postgres", "-c", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"], check=True)
    subprocess.run(["psql", "-q", "-X", f"{PG}/postgres", "-c", f"CREATE DATABASE {DB}"], check=True)
    env["DATABASE_URL"] = f"{PG}/{DB}"

received = []
class Receiver(http.server.BaseHTTPRequestHandler):
    fail = True
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        received.append(json.loads(body))
        # Refuse while the old release runs, so deliveries stay owed in its outbox.
        self.send_response(503 if Receiver.fail else 200); self.end_headers()
    def log_message(self, *a): pass
recv = http.server.ThreadingHTTPServer(("127.0.0.1", 9482), Receiver)
threading.Thread(target=recv.serve_forever, daemon=True).start()

def start(binary):
    p = subprocess.Popen([binary, "serve", "--bind", f"127.0.0.1:{PORT}", "--grpc-bind", "", "--data-dir", DATA],
                         env=env, stdout=subprocess.DEVNULL, stderr=open(f"{DATA}.{os.path.basename(binary)}.log", "w"))
    for _ in range(300):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health/ready", timeout=1).status == 200: return p
        except Exception: time.sleep(0.1)
    raise SystemExit(f"{binary} did not become ready")

def rpc(method, params, raw=False):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/", json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode(),
                                 {"Content-Type": "application/json", "A2A-Version": "1.0"})
    try: return json.loads(urllib.request.urlopen(req, timeout=10).read())
    except urllib.error.HTTPError as e: return json.loads(e.read())

def msg(text=None, data=None, mid=None, **kw):
    part = {"text": text} if text is not None else {"data": data}
    m = {"messageId": mid or os.urandom(8).hex(), "role": "ROLE_USER", "parts": [part]}
    m.update(kw); return m

# ---- the old release writes
old = start(OLD)
import atexit
atexit.register(lambda: old.poll() is None and old.kill())
asked = rpc("SendMessage", {"message": msg("hello", mid="m-hello")})["result"]["task"]          # input required (tool list)
task, ctx = asked["id"], asked["contextId"]
tool = rpc("SendMessage", {"message": msg(data={"tool": "memory_add", "arguments": {"content": "the sky is green here", "layer": "user", "userId": "u1"}}, contextId=ctx)})["result"]["task"]
assert tool["status"]["state"] == "TASK_STATE_COMPLETED", tool
cfg = rpc("CreateTaskPushNotificationConfig", {"taskId": task, "id": "c1", "url": "http://127.0.0.1:9482/hook", "token": "tok"})
assert "result" in cfg, cfg
# an event for the push config: a follow-up on the open task (still input required: free text)
follow = rpc("SendMessage", {"message": msg("still there?", contextId=ctx, taskId=task)})
time.sleep(1.5)   # the old loop tries (receiver refuses) and reschedules
old.terminate(); old.wait(timeout=30)
before = len(received)

# ---- the new build opens it
Receiver.fail = False
new = start(NEW)
atexit.register(lambda: new.poll() is None and new.kill())
ok = []
def check(name, cond, detail=""):
    ok.append(cond); print(("ok   " if cond else "FAIL ") + name + ("" if cond else f": {detail}"))
got = rpc("GetTask", {"id": task, "historyLength": 50})
hist = got.get("result", {}).get("history", [])
check("GetTask reads the old task with its history", got.get("result", {}).get("id") == task and len(hist) >= 3, got)
t2 = rpc("GetTask", {"id": tool["id"], "historyLength": 50})
check("the tool call's task reads (history with the tool call)", t2.get("result", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED", t2)
lst = rpc("ListTasks", {})
check("ListTasks lists both", len(lst.get("result", {}).get("tasks", [])) >= 2, lst)
cfgs = rpc("ListTaskPushNotificationConfigs", {"taskId": task})
check("the push config is there (without its token)", len(cfgs.get("result", {}).get("configs", [])) == 1 and "tok" not in json.dumps(cfgs), cfgs)
again = rpc("SendMessage", {"message": msg("hello", mid="m-hello")})
check("a retry of an old message id is answered from its claim, not run again", again.get("result", {}).get("task", {}).get("id") == task, again)
search = rpc("SendMessage", {"message": msg(data={"tool": "memory_search", "arguments": {"query": "sky", "userId": "u1"}}, contextId=ctx)})
check("memory_search finds the old memory", "sky is green" in json.dumps(search), search)
cont = rpc("SendMessage", {"message": msg(data={"tool": "memory_add", "arguments": {"content": "after the upgrade", "layer": "user", "userId": "u1"}}, contextId=ctx, taskId=task)})
check("a follow-up to the old task commits", cont.get("result", {}).get("task", {}).get("id") == task, cont)
# replay of the old task's event log from the start
req = urllib.request.Request(f"http://127.0.0.1:{PORT}/tasks/{task}:subscribe", b"", {"A2A-Version": "1.0", "Last-Event-ID": "0"}, method="POST")
try:
    body = urllib.request.urlopen(req, timeout=5).read().decode()
except Exception as e:
    body = str(e)
check("the old event log replays (SSE ids from 1)", "id: 1" in body or "id:1" in body or "terminal" in body or "TASK_STATE" in body, body[:300])
for _ in range(100):
    if len(received) > before: break
    time.sleep(0.1)
check("deliveries the old release owed are made by the new one", len(received) > before, f"{before} before, {len(received)} after")
new.terminate(); new.wait(timeout=30)
print(f"{STORE}: {sum(ok)} of {len(ok)} checks passed")
if STORE == "postgres":
    subprocess.run(["psql", "-q", "-X", f"{PG}/postgres", "-c", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"])
sys.exit(0 if all(ok) else 1)
