//go:build !amd64 && !arm64

package spawner

import "embed"

// No helper is built for this architecture: starts go through os/exec.
var helperFS embed.FS

const helperPath = ""
