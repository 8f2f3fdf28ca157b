package static

import "embed"

// Admin holds the control plane's dashboard (index.html, its script and
// style), under the folder "admin".
//
//go:embed admin
var Admin embed.FS
