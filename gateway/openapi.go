package gateway

import (
	"io/fs"
	"sync"

	"github.com/flashgate/flashgate/internal/buildinfo"
	"github.com/flashgate/flashgate/static"
)

var (
	// pOpenAPI is the path of the public API's OpenAPI description.
	pOpenAPI = []byte("/api/openapi.json")
	// hVersion and vVersion are the version header /healthz carries.
	hVersion = []byte(buildinfo.Header)
	vVersion = []byte(buildinfo.Get().Version)
)

// openAPIPage is static/gateway/openapi.json, the OpenAPI 3 description of
// the public routes (docs/api.md in prose), prepared once like the other
// embedded files.
var openAPIPage = sync.OnceValue(func() *page {
	b, err := fs.ReadFile(static.Gateway, "gateway/openapi.json")
	if err != nil {
		panic("gateway: the embedded openapi.json is missing: " + err.Error())
	}
	return newPage(b, ctJSON, []byte("public, max-age=300"))
})
