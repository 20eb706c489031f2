#!/usr/bin/env bash
# node-setup.sh - the DaemonSet's init container: put this image's runsc on
# the node (/usr/local/lib/space/bin, a host path) and build the base
# template into /var/lib/space/templates once (again when the agent in
# the image changed: build-template.sh names images by agent digest).
set -euo pipefail
install -D -m 0755 /opt/space/bin/runsc /usr/local/lib/space/bin/runsc
/opt/space/scripts/build-template.sh --agent /opt/space/bin/space-agent --out /var/lib/space/templates
