package systemtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flashgate/flashgate/internal/testenv/browsertest"
	"github.com/flashgate/flashgate/static"
)

// powWorker serves the item page's scripts and an empty page on loopback
// and opens that page in headless Chromium; ask posts a message to a new
// pow.js worker and returns its answer (progress reports skipped).
func powWorker(t *testing.T) (ctx context.Context, ask func(msg any) string) {
	t.Helper()
	sub, err := fs.Sub(static.Gateway, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/static/", http.StripPrefix("/static/", http.FileServerFS(sub)))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<!doctype html><title>pow</title>")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx = browsertest.New(t, context.Background(), 400, 300, 90*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	return ctx, func(msg any) string {
		t.Helper()
		b, _ := json.Marshal(msg)
		out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`new Promise(function (ok, bad) {
			var w = new Worker("/static/pow.js");
			w.onmessage = function (e) { if (e.data.progress != null) { return; } w.terminate(); ok(JSON.stringify(e.data)); };
			w.onerror = function (e) { w.terminate(); bad(new Error("worker: " + e.message)); };
			w.postMessage(`+string(b)+`);
		})`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("worker message %s: %v", b, err)
		}
		return out
	}
}

// TestPowWorkerSHA256: the worker's own SHA-256 agrees with Go's on the
// standard test vectors and on every length across the padding's block
// boundaries (ASCII and multi-byte UTF-8), and its midstate hashing of a
// salt followed by a number agrees for salts of every length around one
// and two blocks.
func TestPowWorkerSHA256(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	_, ask := powWorker(t)
	msgs := []string{"", "abc", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
		strings.Repeat("a", 1000)}
	for n := 0; n <= 140; n++ {
		msgs = append(msgs, strings.Repeat("x", n), strings.Repeat("é", n/2)+strings.Repeat("z", n%2))
	}
	var got struct{ Hex []string }
	if err := json.Unmarshal([]byte(ask(map[string]any{"digest": msgs})), &got); err != nil || len(got.Hex) != len(msgs) {
		t.Fatalf("digests: %v, %d answers for %d messages", err, len(got.Hex), len(msgs))
	}
	want := map[string]string{ // FIPS 180-2's vectors
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq": "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
		"": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	}
	for i, m := range msgs {
		sum := sha256.Sum256([]byte(m))
		if w := hex.EncodeToString(sum[:]); got.Hex[i] != w || want[m] != "" && want[m] != w {
			t.Errorf("SHA-256 of %d bytes %.20q…: got %s, want %s", len(m), m, got.Hex[i], w)
		}
	}
	numbers := []int64{0, 7, 9, 10, 99999, 100000, 123456789, 9007199254740991}
	for n := 50; n <= 140; n++ {
		salt := strings.Repeat("s", n-len("?sale=fq&")) + "?sale=fq&"
		var h struct{ Hex []string }
		if err := json.Unmarshal([]byte(ask(map[string]any{"hashes": map[string]any{"salt": salt, "numbers": numbers}})), &h); err != nil || len(h.Hex) != len(numbers) {
			t.Fatalf("hashes of a %d-byte salt: %v", n, err)
		}
		for i, x := range numbers {
			sum := sha256.Sum256([]byte(salt + strconv.FormatInt(x, 10)))
			if w := hex.EncodeToString(sum[:]); h.Hex[i] != w {
				t.Errorf("SHA-256 of a %d-byte salt and %d: got %s, want %s", len(salt), x, h.Hex[i], w)
			}
		}
	}
}

// TestPowWorkerRate measures the worker's hashes per second in headless
// Chromium against a native Go loop over the same inputs (a challenge's
// salt followed by 0..count-1), alternating rounds; it logs the figures
// and their ratio (docs/api.md, "Fair queue", records them). It asserts
// nothing of speed: the worker's last hash must be right.
func TestPowWorkerRate(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	ctx, ask := powWorker(t)
	salt := "5f1c0e2a9b7d3e4f6a8c0b1d?sale=fair-drop&max=100000&expires=1796441250&"
	const count = 1_000_000
	var js, native []float64
	for range 3 {
		var r struct {
			Rate float64
			Last string
		}
		if err := json.Unmarshal([]byte(ask(map[string]any{"bench": map[string]any{"salt": salt, "count": count}})), &r); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(salt + strconv.Itoa(count-1)))
		if r.Last != hex.EncodeToString(sum[:]) {
			t.Fatalf("the worker's last hash: got %s, want %x", r.Last, sum)
		}
		js = append(js, r.Rate)
		start := time.Now()
		buf := []byte(salt)
		var sink byte
		for n := range count {
			s := sha256.Sum256(strconv.AppendInt(buf[:len(salt)], int64(n), 10))
			sink ^= s[0]
		}
		_ = sink
		native = append(native, count/time.Since(start).Seconds())
	}
	// The loop the worker had before: one awaited crypto.subtle.digest per
	// candidate.
	subtle, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(async function () {
		var enc = new TextEncoder(), t0 = performance.now(), n;
		for (n = 0; n < 50000; n++) { await crypto.subtle.digest("SHA-256", enc.encode(`+strconv.Quote(salt)+` + n)); }
		return n / ((performance.now() - t0) / 1000);
	})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("awaited crypto.subtle.digest per candidate (the old worker's loop): %.0f hashes/s", subtle)
	for i := range js {
		t.Logf("round %d: worker %.0f hashes/s, Go %.0f hashes/s: native/worker %.2f", i+1, js[i], native[i], native[i]/js[i])
	}
}
