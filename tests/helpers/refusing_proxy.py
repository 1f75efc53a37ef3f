"""An HTTP proxy in front of one `wt serve` that makes one round fail at the inference side.

It forwards every request unchanged, except the Nth POST to the call named by CALL:
  update_weights        the body goes on with the last tensor dropped from every parameter list
                        (names, dtype_names, shapes), which an m2n worker refuses before it posts
                        a receive;
  start_weight_update   answered 503 here, as a receiver that cannot start would, unforwarded;
  init_weight_transfer_engine
                        held, never answered nor forwarded, as by a receiver that stopped.
It prints "listening on PORT" once it accepts connections, and "refused-at NS" (CLOCK_REALTIME,
ns) when it refuses or holds; both flushed to stdout.

    refusing_proxy.py LISTEN_PORT UPSTREAM_PORT N [CALL]
"""
import http.client
import http.server
import json
import sys
import time

listen_port, upstream_port, nth = (int(a) for a in sys.argv[1:4])
call = sys.argv[4] if len(sys.argv) > 4 else "update_weights"
calls = 0


def drop_last(node):
    if isinstance(node, dict):
        if isinstance(node.get("names"), list):
            for key in ("names", "dtype_names", "shapes"):
                if isinstance(node.get(key), list) and node[key]:
                    node[key].pop()
        for value in node.values():
            drop_last(value)
    elif isinstance(node, list):
        for value in node:
            drop_last(value)


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        global calls
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.command == "POST" and self.path.rstrip("/").endswith(call):
            calls += 1
            if calls == nth and call == "init_weight_transfer_engine":
                print(f"refused-at {time.time_ns()}", flush=True)
                while True:  # until the process ends
                    time.sleep(3600)
            if calls == nth and call == "start_weight_update":
                print(f"refused-at {time.time_ns()}", flush=True)
                answer = b'{"detail": "this receiver cannot start an update now"}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                return
            if calls == nth:
                doc = json.loads(body)
                drop_last(doc)
                body = json.dumps(doc).encode()
                print(f"refused-at {time.time_ns()}", flush=True)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("content-length", "connection", "host")}
        upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=300)
        upstream.request(self.command, self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        upstream.close()

    do_GET = do_POST = do_PUT = do_DELETE = forward


server = http.server.ThreadingHTTPServer(("127.0.0.1", listen_port), Proxy)
print(f"listening on {listen_port}", flush=True)
server.serve_forever()
