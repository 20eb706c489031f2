"""Build-time attempts: run by a template build's RUN step (build_test.go),
not by harness.py. Each HTTP target must not answer with its marker; a
server of the step's own on its loopback answers (the control). The result
is printed as one RTBUILD line of the build's log."""

import http.server
import json
import os
import socket
import sys
import threading
import urllib.request


def gateway():
    """The build sandbox's default gateway: the host end of its veth."""
    with open("/proc/net/route") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == "00000000":
                return socket.inet_ntoa(int(fields[2], 16).to_bytes(4, "little"))
    return ""


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.read(4096).decode("latin-1")
    except Exception as e:  # what happened, for the log
        return "error: " + type(e).__name__ + ": " + str(e)[:120]


def own_server():
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OWN-SERVER")

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


def main():
    targets = json.loads(os.environ["RT_BUILD"])
    gw = gateway()
    out = {"gateway": gw, "res": {}, "ctl": {}}
    for name, url in targets.items():
        out["res"][name] = fetch(url.replace("GATEWAY", gw))
    port = own_server()
    got = fetch("http://127.0.0.1:%d/" % port)
    out["ctl"]["own-loopback-server"] = "" if got == "OWN-SERVER" else got
    print("RTBUILD " + json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
