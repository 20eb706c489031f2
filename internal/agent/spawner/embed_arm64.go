package spawner

import "embed"

// helperFS holds bin/arm64/space-spawn when the build made it; only this
// architecture's directory is embedded, so an agent never carries
// another's helper.
//
//go:embed bin/arm64
var helperFS embed.FS

const helperPath = "bin/arm64/space-spawn"
