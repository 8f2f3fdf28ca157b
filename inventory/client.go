package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/jsonstr"
)

// ClientConfig configures a Client. The zero value is a valid configuration.
type ClientConfig struct {
	// Timeout bounds each call, connecting included; a context deadline
	// that comes sooner wins. Zero means DefaultClientTimeout.
	Timeout time.Duration
	// MaxConnsPerAddr is the most connections to one inventory address.
	// Zero means DefaultMaxConnsPerAddr.
	MaxConnsPerAddr int
	// Dial opens connections; tests pass an in-memory listener's. Nil means
	// fasthttp's TCP dialer.
	Dial fasthttp.DialFunc
	// Token is the bearer token the inventory tiers require (their
	// HandlerConfig.Token). Empty: none.
	Token string
	// Retries is how many times a call whose request never reached an
	// inventory, or whose answer was lost (any transport failure: a
	// keep-alive connection to a restarted inventory, a reset, a timeout),
	// is sent again, each time on a freshly dialled connection to the
	// address after the one that failed, while the deadline allows. Reserve sends the order id it
	// minted, so a retry never reserves twice. Zero means DefaultRetries;
	// negative: none.
	Retries int
	// NewOrderID mints the order id Reserve sends; it must be safe for
	// concurrent use and return ids that satisfy flashgate.ValidOrderID.
	// Nil means a monotonic ULID.
	NewOrderID func() string
}

// The defaults of ClientConfig's fields: withDefaults fills them in.
const (
	DefaultClientTimeout   = 2 * time.Second
	DefaultMaxConnsPerAddr = 512
	DefaultRetries         = 2
)

// withDefaults returns c with each zero field (a zero or negative
// duration or size, where negative has no meaning of its own) set to its
// default.
func (c ClientConfig) withDefaults() ClientConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultClientTimeout
	}
	if c.MaxConnsPerAddr <= 0 {
		c.MaxConnsPerAddr = DefaultMaxConnsPerAddr
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	if c.NewOrderID == nil {
		c.NewOrderID = ulidMinter(flashgate.SystemClock{})
	}
	return c
}

// Client calls inventory tiers served by NewHandler, spreading calls over
// their addresses (least loaded first). It has the Service's Reserve and
// Release and is safe for concurrent use.
type Client struct {
	addrs   []*address
	next    atomic.Uint32 // rotates the first choice among equally loaded addresses
	retries int
	newID   func() string
	timeout time.Duration
	auth    []byte // Authorization value sent with every call; nil = none
}

// NewClient returns a Client for addrs, each "http://host:port" (or
// https://). A malformed address is an error wrapping flashgate.ErrBadRequest.
func NewClient(addrs []string, cfg ClientConfig) (*Client, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("inventory client: no addresses: %w", flashgate.ErrBadRequest)
	}
	cfg = cfg.withDefaults()
	c := &Client{timeout: cfg.Timeout, retries: max(cfg.Retries, 0), newID: cfg.NewOrderID}
	for _, a := range addrs {
		hostport, tls, err := parseAddr(a)
		if err != nil {
			return nil, err
		}
		hc := func() *fasthttp.HostClient {
			return &fasthttp.HostClient{
				Addr:                     hostport,
				Name:                     "flashgate-inventory-client",
				IsTLS:                    tls,
				Dial:                     cfg.Dial,
				MaxConns:                 cfg.MaxConnsPerAddr,
				ReadTimeout:              cfg.Timeout,
				WriteTimeout:             cfg.Timeout,
				MaxIdleConnDuration:      30 * time.Second,
				MaxResponseBodySize:      MaxBodySize,
				NoDefaultUserAgentHeader: true,
			}
		}
		c.addrs = append(c.addrs, &address{pooled: hc(), fresh: hc()})
	}
	if cfg.Token != "" {
		c.auth = []byte("Bearer " + cfg.Token)
	}
	return c, nil
}

// address is one inventory address: a pooled client for first attempts,
// and one that never keeps a connection, for retries.
type address struct {
	pooled, fresh *fasthttp.HostClient
	// penalty counts this address's transport failures of the last
	// penaltyFor: each weighs as one call in flight, so that calls go
	// elsewhere while it is down (as fasthttp.LBClient does).
	penalty atomic.Int32
}

// penaltyFor is how long a transport failure weighs on its address; at
// most maxPenalty failures weigh at once.
const (
	penaltyFor = 3 * time.Second
	maxPenalty = 300
)

// load is the address's calls in flight plus its penalty.
func (a *address) load() int { return a.pooled.PendingRequests() + int(a.penalty.Load()) }

// failed adds a penalty for penaltyFor.
func (a *address) failed() {
	if a.penalty.Add(1) > maxPenalty {
		a.penalty.Add(-1)
		return
	}
	time.AfterFunc(penaltyFor, func() { a.penalty.Add(-1) })
}

// pick returns the index of the least loaded address, ties going round.
func (c *Client) pick() int {
	n := len(c.addrs)
	start := int(c.next.Add(1) % uint32(n))
	best, bestLoad := start, c.addrs[start].load()
	for k := 1; k < n && bestLoad > 0; k++ {
		j := (start + k) % n
		if l := c.addrs[j].load(); l < bestLoad {
			best, bestLoad = j, l
		}
	}
	return best
}

// parseAddr checks that a is http(s)://host:port with nothing else.
func parseAddr(a string) (hostport string, tls bool, err error) {
	bad := func(why string) (string, bool, error) {
		return "", false, fmt.Errorf("inventory client: address %q: %s: %w", a, why, flashgate.ErrBadRequest)
	}
	u, perr := url.Parse(a)
	if perr != nil {
		return bad("not a URL")
	}
	switch u.Scheme {
	case "http":
	case "https":
		tls = true
	default:
		return bad("scheme must be http or https")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" {
		return bad("want only scheme, host and port")
	}
	if u.Hostname() == "" || u.Port() == "" || strings.ContainsAny(u.Host, " \t") {
		return bad("want host:port")
	}
	return u.Host, tls, nil
}

// answer is the JSON the handler answers with.
type answer struct {
	OrderID  string `json:"order_id"`
	Error    string `json:"error"`
	Released bool   `json:"released"`
	// Paused marks a reserve refused for a paused sale (flashgate.ErrPaused).
	Paused bool `json:"paused"`
}

// Reserve is Service.ReserveOrder over HTTP with an order id minted here,
// so that a call retried after a transport failure (see
// ClientConfig.Retries) reserves at most once; "already purchased" under
// that same id is the first attempt's success. A transport failure that
// outlasts the retries, or an answer that is not the handler's, is
// ErrUnavailable.
func (c *Client) Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (string, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)

	orderID := c.newID()
	var arr [320]byte
	b := append(arr[:0], `{"order_id":`...)
	b = jsonstr.Append(b, orderID)
	b = append(b, `,"sale_id":`...)
	b = jsonstr.Append(b, saleID)
	b = append(b, `,"user_id":`...)
	b = jsonstr.Append(b, userID)
	b = append(b, `,"quantity":`...)
	b = strconv.AppendInt(b, qty, 10)
	if variant != "" {
		b = append(b, `,"variant":`...)
		b = jsonstr.Append(b, variant)
	}
	b = append(b, '}')
	c.prepare(req, PathReserve, b)

	var a answer
	if err := c.do(ctx, req, resp, &a); err != nil {
		return "", fmt.Errorf("reserving: %w", err)
	}
	if resp.StatusCode() == fasthttp.StatusOK {
		if a.OrderID == "" {
			return "", fmt.Errorf("reserving: answer without order id: %w", flashgate.ErrUnavailable)
		}
		return a.OrderID, nil
	}
	if a.Error == "already_purchased" && a.OrderID == orderID {
		// A retry whose first attempt reserved and lost its answer.
		return orderID, nil
	}
	return "", fmt.Errorf("reserving: %w", answerError(resp.StatusCode(), &a))
}

// Release is Service.Release over HTTP.
func (c *Client) Release(ctx context.Context, o flashgate.Order) (bool, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)

	b, err := json.Marshal(o)
	if err != nil {
		return false, fmt.Errorf("releasing: %w", flashgate.ErrBadRequest)
	}
	c.prepare(req, PathRelease, b)
	var a answer
	if err := c.do(ctx, req, resp, &a); err != nil {
		return false, fmt.Errorf("releasing: %w", err)
	}
	if resp.StatusCode() == fasthttp.StatusOK {
		return a.Released, nil
	}
	return false, fmt.Errorf("releasing: %w", answerError(resp.StatusCode(), &a))
}

func (c *Client) prepare(req *fasthttp.Request, path string, body []byte) {
	req.Header.SetMethod(fasthttp.MethodPost)
	if c.auth != nil {
		req.Header.SetBytesV(fasthttp.HeaderAuthorization, c.auth)
	}
	req.Header.SetHost("inventory")
	req.SetRequestURI(path)
	req.Header.SetContentTypeBytes(contentJSON)
	req.SetBody(body)
}

// do sends req within the sooner of ctx's deadline and the client timeout,
// and decodes the answer into a.
func (c *Client) do(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response, a *answer) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w (%w)", flashgate.ErrUnavailable, err)
	}
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	i := c.pick()
	err := c.addrs[i].pooled.DoDeadline(req, resp, deadline)
	for attempt := 0; err != nil && attempt < c.retries && time.Now().Before(deadline) && ctx.Err() == nil; attempt++ {
		// The request never arrived or its answer was lost: the calls are
		// idempotent (Reserve carries its order id, Release is once per
		// order), so send it again on a new connection, to the address
		// after the one that failed (an inventory shutting down or
		// restarted fails again). A pooled connection may be one a
		// restarted inventory left behind; Connection: close keeps the
		// retry's own out of the pool.
		c.addrs[i].failed()
		i = (i + 1) % len(c.addrs)
		req.SetConnectionClose()
		resp.Reset()
		err = c.addrs[i].fresh.DoDeadline(req, resp, deadline)
	}
	if err != nil {
		c.addrs[i].failed()
		return fmt.Errorf("%w (%w)", flashgate.ErrUnavailable, err)
	}
	if err := json.Unmarshal(resp.Body(), a); err != nil {
		return fmt.Errorf("inventory answered %d without JSON: %w", resp.StatusCode(), flashgate.ErrUnavailable)
	}
	return nil
}

// answerError turns an error answer back into the sentinel it came from.
func answerError(status int, a *answer) error {
	switch a.Error {
	case "already_purchased":
		return &flashgate.PurchasedError{OrderID: a.OrderID}
	case "unauthorized":
		// The tiers disagree on the token: a deployment fault, never the
		// buyer's, so the buyer must not be told "unauthorized".
		return fmt.Errorf("inventory refused this client's token: %w", flashgate.ErrUnavailable)
	}
	if a.Paused && a.Error == "unavailable" {
		return flashgate.ErrPaused
	}
	if err := flashgate.ErrorForCode(a.Error); err != nil {
		return err
	}
	// A 500 "internal" or a stranger's answer: the tier failed.
	return fmt.Errorf("inventory answered %d %q: %w", status, a.Error, flashgate.ErrUnavailable)
}
