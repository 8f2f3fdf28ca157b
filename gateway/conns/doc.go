// Package conns owns the gateway's connections below HTTP: the timeouts
// each connection enforces itself on a coarse clock read from memory (so a
// request reads no clock to arm a deadline), and the split of accepted
// connections between a fast server that keeps buffers and a lean one that
// does not.
//
// It knows nothing of requests, sales or tokens, and may not import the
// gateway's root or any other package of the module: it is a leaf on the
// standard library.
package conns
