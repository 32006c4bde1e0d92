"""A scripted model behind the OpenAI Responses API (streaming), for driving a real agent in tests.

Usage: python3 scripted_model.py LOG_FILE

Prints `listening on http://127.0.0.1:PORT` once it accepts. Every request body is appended to
LOG_FILE as one JSON line. The script:

- a request whose input holds no tool output yet: one response with every call of the turn
  (two writes of one file, two increments of one counter, a read, an unrelated sleep, and a
  delete the policy denies), each named as the agent offered the tool (the offered name that
  ends with the Sluice tool id, its characters outside [A-Za-z0-9_-] as `_`);
- any later request: a final message, which ends the turn.

Standard library only: the test runs it with the machine's python3.
"""

import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[1]

# (call id, Sluice tool id, arguments)
TURN = [
    ("w1", "sluice.fs.write", {"path": "notes.txt", "content": "first\n"}),
    ("w2", "sluice.fs.write", {"path": "notes.txt", "content": "second\n"}),
    ("i1", "sluice.kv.incr", {"key": "counter", "delay_ms": 150}),
    ("i2", "sluice.kv.incr", {"key": "counter", "delay_ms": 150}),
    ("r1", "sluice.kv.get", {"key": "greeting"}),
    ("s1", "sluice.sleep", {"ms": 400}),
    ("d1", "sluice.kv.delete", {"key": "greeting"}),
]


def sanitized(tool_id):
    return re.sub(r"[^A-Za-z0-9_-]", "_", tool_id)


def offered(body):
    """Every function tool offered, as (namespace or None, name); an MCP server's tools come in
    a namespace of their own (Codex: `mcp__<server>`)."""
    names = []
    for t in body.get("tools") or []:
        if t.get("type") == "namespace":
            for inner in t.get("tools") or []:
                if inner.get("name"):
                    names.append((t.get("name"), inner["name"]))
        elif t.get("name"):
            names.append((None, t["name"]))
    return names


def pick(names, tool_id):
    want = sanitized(tool_id)
    for ns, n in names:
        if n == tool_id or n.endswith(want):
            return ns, n
    return None, want


def has_tool_output(body):
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            return True
    return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"unreadable": raw.decode("utf-8", "replace")}
        with open(LOG, "a") as f:
            f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        if not self.path.endswith("/responses"):
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        events = [{"type": "response.created", "response": {"id": "resp_1"}}]
        if has_tool_output(body):
            item = {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "content": [{"type": "output_text", "text": "All done."}],
            }
            events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
        else:
            names = offered(body)
            for i, (call, tool, args) in enumerate(TURN):
                ns, name = pick(names, tool)
                item = {
                    "type": "function_call",
                    "id": "fc_" + call,
                    "call_id": "call_" + call,
                    "name": name,
                    "arguments": json.dumps(args),
                }
                if ns:
                    item["namespace"] = ns
                events.append(
                    {"type": "response.output_item.done", "output_index": i, "item": item}
                )
        events.append(
            {
                "type": "response.completed",
                "response": {
                    "id": "resp_1",
                    "usage": {
                        "input_tokens": 10,
                        "input_tokens_details": None,
                        "output_tokens": 10,
                        "output_tokens_details": None,
                        "total_tokens": 20,
                    },
                },
            }
        )
        payload = "".join(
            "event: %s\ndata: %s\n\n" % (e["type"], json.dumps(e)) for e in events
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
server.serve_forever()
