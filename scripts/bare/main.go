// Command bare is the baseline of `make bench`: a fasthttp server that
// answers every request with a small constant JSON body and does nothing
// else, so the gateway's figures can be read as a ratio of it.
package main

import (
	"fmt"
	"os"

	"github.com/valyala/fasthttp"
)

var body = []byte(`{"error":"sold_out"}`)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bare host:port")
		os.Exit(2)
	}
	h := func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}
	if err := (&fasthttp.Server{Handler: h, NoDefaultServerHeader: true}).ListenAndServe(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}
