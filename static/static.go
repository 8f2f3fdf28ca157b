// Package static holds flashgate's embedded pages, templates and scripts.
package static

import "embed"

// Gateway holds the public item page template, its 404 page and the buy
// button's script and style, under the folder "gateway".
//
//go:embed gateway
var Gateway embed.FS
