// Command bare is the baseline of `make bench`: a fasthttp server that does
// nothing but answer. With no response files it answers every request with a
// small constant JSON body. Given PATH=FILE arguments, each FILE a raw HTTP
// response (status line, headers, blank line, body) captured from flashgate,
// it answers a request for PATH with exactly that response (the server adds
// only its own Date header, so captured Date headers are dropped), and any
// other path with the constant body. That way gateway and baseline send the
// same bytes and the ratio measures only the work the gateway does.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/valyala/fasthttp"
)

var body = []byte(`{"error":"sold_out"}`)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bare host:port [PATH=RESPONSE-FILE ...]")
		os.Exit(2)
	}
	replies := map[string]*fasthttp.Response{}
	for _, a := range os.Args[2:] {
		path, file, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(path, "/") {
			fmt.Fprintf(os.Stderr, "bare: %q: want /path=response-file\n", a)
			os.Exit(2)
		}
		r, err := load(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bare:", err)
			os.Exit(1)
		}
		replies[path] = r
	}
	h := func(ctx *fasthttp.RequestCtx) {
		if r, ok := replies[string(ctx.Path())]; ok {
			r.CopyTo(&ctx.Response)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}
	if err := (&fasthttp.Server{Handler: h, NoDefaultServerHeader: true}).ListenAndServe(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}

// load reads a raw HTTP response and drops its Date header, which the
// server sets itself.
func load(file string) (*fasthttp.Response, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	r := &fasthttp.Response{}
	if err := r.Read(bufio.NewReader(bytes.NewReader(raw))); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	r.Header.Del("Date")
	return r, nil
}
