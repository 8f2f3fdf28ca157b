package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// variantSale prepares a sale of the given variants in Redis (as Prepare
// with a variants spec leaves it: the sums in total and booked, each
// variant's figures in its own fields) and in the catalog, open.
func (e *env) variantSale(t testing.TB, id string, vs []flashgate.Variant, booked map[string]int64) {
	t.Helper()
	var total, sum int64
	ids := make([]string, len(vs))
	for i, v := range vs {
		total += v.Total
		sum += booked[v.ID]
		ids[i] = v.ID
	}
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, e.primary, lua.SaleKeys(id), total, 2*total, 1, 1999).Err(); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	fields := []any{lua.FieldVariants, strings.Join(ids, ","), lua.FieldBooked, sum}
	for _, v := range vs {
		fields = append(fields, lua.VariantField(v.ID, lua.FieldTotal), v.Total,
			lua.VariantField(v.ID, lua.FieldBooked), booked[v.ID], lua.VariantField(v.ID, lua.FieldReserved), booked[v.ID])
	}
	if err := e.primary.HSet(ctx, lua.SaleKey(id), fields...).Err(); err != nil {
		t.Fatalf("hset: %v", err)
	}
	e.setState(t, id, "open")
	e.catalog.put(flashgate.Sale{ID: id, Name: "Shoe", PriceCents: 1999, Total: total, Variants: vs})
}

var sizes = []flashgate.Variant{{ID: "S", Name: "Small", Total: 2}, {ID: "M", Name: "Medium", Total: 3}, {ID: "L", Name: "Large", Total: 1}}

// TestVariantPurchase checks the purchase path of a sale with variants: a
// sold-out variant answered from the cache (no Reserve call) while the
// others sell, the 201 naming the variant, and the body's 400s.
func TestVariantPurchase(t *testing.T) {
	fr := &fakeReserver{}
	e := newEnv(t, func(c *Config) { c.Reserver = fr; c.UserRate = -1 })
	e.variantSale(t, "shoe", sizes, map[string]int64{"L": 1})
	e.sale(t, "plain", 5, 8, true)
	h := e.s.Handler()
	tests := []struct {
		name, sale, body string
		status           int
		want             string
		reserves         int64
	}{
		{"sold-out variant", "shoe", `{"variant":"L"}`, 409, `{"error":"sold_out","variant":"L"}`, 0},
		{"other variant sells", "shoe", `{"quantity":1,"variant":"M"}`, 201, `{"order_id":"f1","sale_id":"shoe","user_id":"u","variant":"M","status":"reserved"}`, 1},
		{"escaped variant", "shoe", `{"variant":"\u0053"}`, 201, `"variant":"S"`, 1},
		{"missing variant", "shoe", `{"quantity":1}`, 400, `{"error":"bad_request"}`, 0},
		{"no body", "shoe", ``, 400, `{"error":"bad_request"}`, 0},
		{"null variant", "shoe", `{"variant":null}`, 400, `{"error":"bad_request"}`, 0},
		{"unknown variant", "shoe", `{"variant":"XL"}`, 400, `{"error":"bad_request"}`, 0},
		{"case of an id", "shoe", `{"variant":"m"}`, 400, `{"error":"bad_request"}`, 0},
		{"variant on a plain sale", "plain", `{"variant":"M"}`, 400, `{"error":"bad_request"}`, 0},
		{"plain sale", "plain", `{"quantity":1,"variant":null}`, 201, `"sale_id":"plain","user_id":"u","status":"reserved"}`, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fr.n.Load()
			r := do(h, req{method: "POST", path: "/api/sales/" + tc.sale + "/orders", token: token(t, "u"), body: tc.body})
			if r.StatusCode() != tc.status || !strings.Contains(string(r.Body()), tc.want) {
				t.Fatalf("got %d %s, want %d %s", r.StatusCode(), r.Body(), tc.status, tc.want)
			}
			if got := fr.n.Load() - before; got != tc.reserves {
				t.Fatalf("got %d Reserve calls, want %d", got, tc.reserves)
			}
		})
	}
}

// TestVariantSoldOutByReserver checks that a Reserver's sold out for a
// purchase naming a variant is answered naming it.
func TestVariantSoldOutByReserver(t *testing.T) {
	fr := &fakeReserver{err: flashgate.ErrSoldOut}
	e := newEnv(t, func(c *Config) { c.Reserver = fr })
	e.variantSale(t, "shoe", sizes, nil)
	r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/shoe/orders", token: token(t, "u"), body: `{"variant":"S"}`})
	if want := `{"error":"sold_out","variant":"S"}`; r.StatusCode() != 409 || string(r.Body()) != want {
		t.Fatalf("got %d %s, want 409 %s", r.StatusCode(), r.Body(), want)
	}
	fr.err = &flashgate.FieldError{Field: "variant", Reason: "unknown"}
	r = do(e.s.Handler(), req{method: "POST", path: "/api/sales/shoe/orders", token: token(t, "v"), body: `{"variant":"S"}`})
	if want := `{"error":"bad_request"}`; r.StatusCode() != 400 || string(r.Body()) != want {
		t.Fatalf("got %d %s, want 400 %s", r.StatusCode(), r.Body(), want)
	}
}

// TestVariantSaleView checks GET /api/sales/{id}'s variants, their
// remaining following Redis at the next refresh, and the whole sale sold
// out (every purchase answered 409 sold_out) once every variant is.
func TestVariantSaleView(t *testing.T) {
	fr := &fakeReserver{}
	e := newEnv(t, func(c *Config) { c.Reserver = fr })
	e.variantSale(t, "shoe", sizes, map[string]int64{"S": 1, "L": 1})
	h := e.s.Handler()
	view := func() string {
		t.Helper()
		r := do(h, req{method: "GET", path: "/api/sales/shoe"})
		if r.StatusCode() != 200 {
			t.Fatalf("got %d %s, want 200", r.StatusCode(), r.Body())
		}
		return string(r.Body())
	}
	want := `,"variants":[{"id":"S","name":"Small","total":2,"remaining":1},{"id":"M","name":"Medium","total":3,"remaining":3},{"id":"L","name":"Large","total":1,"remaining":0}]}`
	if got := view(); !strings.HasSuffix(got, want) || !strings.Contains(got, `"total":6,"remaining":4,"state":"open"`) {
		t.Fatalf("got %s, want the sums (6, 4) and the suffix %s", got, want)
	}
	// M sells out in Redis: the next refresh answers it from the cache
	// while S still sells.
	ctx := context.Background()
	if err := e.primary.HSet(ctx, lua.SaleKey("shoe"), lua.FieldBooked, 5, lua.VariantField("M", lua.FieldBooked), 3).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	if r := do(h, req{method: "POST", path: "/api/sales/shoe/orders", token: token(t, "u"), body: `{"variant":"M"}`}); r.StatusCode() != 409 || string(r.Body()) != `{"error":"sold_out","variant":"M"}` {
		t.Fatalf("M: got %d %s, want 409 naming M", r.StatusCode(), r.Body())
	}
	if r := do(h, req{method: "POST", path: "/api/sales/shoe/orders", token: token(t, "u"), body: `{"variant":"S"}`}); r.StatusCode() != 201 {
		t.Fatalf("S: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	if got := view(); !strings.Contains(got, `{"id":"M","name":"Medium","total":3,"remaining":0}`) {
		t.Fatalf("got %s, want M with none remaining", got)
	}
	// Every variant sold out: the sums say so too.
	if err := e.primary.HSet(ctx, lua.SaleKey("shoe"), lua.FieldBooked, 6,
		lua.VariantField("S", lua.FieldBooked), 2, lua.VariantField("M", lua.FieldBooked), 3).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	if got := view(); !strings.Contains(got, `"remaining":0,"state":"sold_out"`) || strings.Contains(got, `"remaining":1`) || strings.Contains(got, `"remaining":3`) {
		t.Fatalf("got %s, want every variant and the sale sold out", got)
	}
	for _, body := range []string{`{"variant":"M"}`, `{"variant":"S"}`, `{"variant":"nope"}`} {
		r := do(h, req{method: "POST", path: "/api/sales/shoe/orders", token: token(t, "u"), body: body})
		if r.StatusCode() != 409 || string(r.Body()) != `{"error":"sold_out"}` {
			t.Fatalf("%s: got %d %s, want 409 sold_out", body, r.StatusCode(), r.Body())
		}
	}
	if n := fr.n.Load(); n != 1 {
		t.Fatalf("got %d Reserve calls, want 1 (S's)", n)
	}
}

// TestVariantSoldOutAllocs proves a purchase of a sold-out variant, answered
// from the cache, allocates nothing.
func TestVariantSoldOutAllocs(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.variantSale(t, "shoe", sizes, map[string]int64{"L": 1})
	h := e.s.Handler()
	r := req{method: "POST", path: "/api/sales/shoe/orders", token: token(t, "loser"), body: `{"quantity":1,"variant":"L"}`}
	if got := allocsPerRequest(t, h, r, fasthttp.StatusConflict); got != 0 {
		t.Fatalf("got %v allocations per request, want 0", got)
	}
}

// TestParsePurchase checks the purchase body's reading, attacker inputs
// among them: each is read or refused, never more.
func TestParsePurchase(t *testing.T) {
	long := `{"variant":"` + strings.Repeat("A", 17) + `"}`
	tests := []struct {
		body    string
		qty     int64
		variant string
		ok      bool
	}{
		{``, 1, "", true},
		{"  \n", 1, "", true},
		{`{}`, 1, "", true},
		{`{"quantity":3}`, 3, "", true},
		{`{"quantity":null,"variant":null}`, 1, "", true},
		{` {"variant" : "42" , "quantity" : 2} `, 2, "42", true},
		{`{"variant":"` + strings.Repeat("A", 16) + `"}`, 1, strings.Repeat("A", 16), true},
		{`{"quant\u0069ty":2}`, 2, "", true},
		{`null`, 0, "", false},
		{`[]`, 0, "", false},
		{`"x"`, 0, "", false},
		{long, 0, "", false},
		{`{"variant":""}`, 0, "", false},
		{`{"variant":"a b"}`, 0, "", false},
		{`{"variant":"a:b"}`, 0, "", false},
		{`{"variant":"\u00e9"}`, 0, "", false},
		{"{\"variant\":\"\xff\"}", 0, "", false},
		{`{"variant":"a\u0000"}`, 0, "", false},
		{`{"variant":42}`, 0, "", false},
		{`{"variant":["S"]}`, 0, "", false},
		{`{"variant":"S","variant":"M"}`, 0, "", false},
		{`{"quantity":1,"quantity":1}`, 0, "", false},
		{`{"Quantity":1}`, 0, "", false},
		{`{"Variant":"S"}`, 0, "", false},
		{`{"units":1}`, 0, "", false},
		{`{"quantity":0}`, 0, "", false},
		{`{"quantity":-1}`, 0, "", false},
		{`{"quantity":1.0}`, 0, "", false},
		{`{"quantity":1e2}`, 0, "", false},
		{`{"quantity":"1"}`, 0, "", false},
		{`{"quantity":9223372036854775808}`, 0, "", false},
		{`{"quantity":9223372036854775807}`, 9223372036854775807, "", true},
		{`{"quantity":01}`, 0, "", false},
		{`{"quantity":1}{}`, 0, "", false},
		{`{"quantity":1,}`, 0, "", false},
		{`{"quantity":1`, 0, "", false},
		{`{"variant":"S`, 0, "", false},
		{`{"variant":nul}`, 0, "", false},
		{`{`, 0, "", false},
	}
	for _, tc := range tests {
		var vbuf [flashgate.MaxVariantIDLen]byte
		qty, v, ok := parsePurchase([]byte(tc.body), &vbuf)
		if ok != tc.ok || ok && (qty != tc.qty || string(v) != tc.variant || (tc.variant == "") != (v == nil)) {
			t.Errorf("%q: got %d %q %v, want %d %q %v", tc.body, qty, v, ok, tc.qty, tc.variant, tc.ok)
		}
	}
}

// FuzzParsePurchase checks that no body panics the parser and that what it
// accepts is what encoding/json reads (with a valid variant id and a
// quantity of at least 1).
func FuzzParsePurchase(f *testing.F) {
	for _, s := range []string{``, `{"quantity":1,"variant":"S"}`, `{"variant":null}`, `null`, `{"variant":"S","variant":"M"}`, `{"quantity":1e2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var vbuf [flashgate.MaxVariantIDLen]byte
		qty, v, ok := parsePurchase(body, &vbuf)
		if !ok {
			return
		}
		if qty < 1 || v != nil && !flashgate.ValidVariantID(v) {
			t.Fatalf("%q: accepted quantity %d, variant %q", body, qty, v)
		}
		trimmed := bytes.TrimSpace(body)
		if len(trimmed) == 0 {
			return
		}
		var ref struct {
			Quantity *int64  `json:"quantity"`
			Variant  *string `json:"variant"`
		}
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ref); err != nil {
			t.Fatalf("%q: accepted (%d, %q), encoding/json refuses it: %v", body, qty, v, err)
		}
		wantQty, wantV := int64(1), ""
		if ref.Quantity != nil {
			wantQty = *ref.Quantity
		}
		if ref.Variant != nil {
			wantV = *ref.Variant
		}
		if qty != wantQty || string(v) != wantV {
			t.Fatalf("%q: got (%d, %q), encoding/json reads (%d, %q)", body, qty, v, wantQty, wantV)
		}
	})
}

// TestVariantRefreshReads checks that a refresh reads each variant sale's
// figures with one HMGET beside its state's, and that purchases answered
// from the cache send Redis nothing.
func TestVariantRefreshReads(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{}; c.UserRate = -1 })
	e.variantSale(t, "a", sizes, map[string]int64{"L": 1})
	e.variantSale(t, "b", sizes, map[string]int64{"L": 1})
	e.sale(t, "plain", 5, 8, true)
	h := e.s.Handler()
	for _, id := range []string{"a", "b", "plain"} {
		do(h, req{method: "GET", path: "/api/sales/" + id})
	}
	ctx := context.Background()
	before := cmdStats(t, e.primary)
	e.s.refreshState(ctx)
	mid := cmdStats(t, e.primary)
	if got := mid["hmget"] - before["hmget"]; got != 5 {
		t.Fatalf("got %d HMGETs for a refresh of 3 sales, 2 with variants, want 5", got)
	}
	for range 10 {
		if r := do(h, req{method: "POST", path: "/api/sales/a/orders", token: token(t, "u"), body: `{"variant":"L"}`}); r.StatusCode() != 409 {
			t.Fatalf("got %d %s, want 409", r.StatusCode(), r.Body())
		}
	}
	after := cmdStats(t, e.primary)
	for cmd, n := range after {
		// INFO commandstats itself is the only command between the two readings.
		if cmd != "info" && n != mid[cmd] {
			t.Fatalf("%s: got %d calls after the purchases, %d before, want none", cmd, n, mid[cmd])
		}
	}
}

// TestVariantCatalogDown checks that while the catalog has never answered
// for a sale the gateway cannot judge a variant, so it passes a well-formed
// one on for the Reserver to judge, and refuses a malformed one itself.
func TestVariantCatalogDown(t *testing.T) {
	fr := &fakeReserver{}
	fc := &failingCatalog{inner: &fakeCatalog{}}
	fc.fail.Store(true)
	e := newEnv(t, func(c *Config) { c.Reserver = fr; c.Catalog = fc; c.UserRate = -1 })
	e.variantSale(t, "shoe", sizes, nil)
	h := e.s.Handler()
	r := do(h, req{method: "POST", path: "/api/sales/shoe/orders", token: token(t, "u"), body: `{"variant":"M"}`})
	if r.StatusCode() != 201 || !strings.Contains(string(r.Body()), `"variant":"M"`) {
		t.Fatalf("got %d %s, want 201 naming M", r.StatusCode(), r.Body())
	}
	if v := fr.variant.Load(); v == nil || *v != "M" {
		t.Fatalf("got variant %v passed on, want M", v)
	}
	r = do(h, req{method: "POST", path: "/api/sales/shoe/orders", token: token(t, "v"), body: `{"variant":"M M"}`})
	if r.StatusCode() != 400 {
		t.Fatalf("got %d %s, want 400", r.StatusCode(), r.Body())
	}
}
