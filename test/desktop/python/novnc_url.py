"""For viewer_test.go: creates a desktop with the unmodified SDK, starts its
stream (with require_auth when the argument is "auth") and prints what a
person's viewer is given, as JSON: the sandbox's id, stream.get_url() (with
the key when there is one) and get_auth_key(). The sandbox is left running;
the Go test kills it."""
import json
import sys

from e2b_desktop import Sandbox

auth = sys.argv[1:] == ["auth"]
sbx = Sandbox.create(timeout=600)
sbx.stream.start(require_auth=auth)
key = sbx.stream.get_auth_key() if auth else None
print(json.dumps({"id": sbx.sandbox_id, "url": sbx.stream.get_url(auth_key=key), "key": key}))
