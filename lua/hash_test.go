package lua_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

func TestInt(t *testing.T) {
	tests := []struct {
		v    any
		want int64
	}{
		{"42", 42},
		{"-7", -7},
		{"", 0},
		{"1.5", 0},
		{"x", 0},
		{nil, 0},
		{int64(3), 0}, // HMGET and HGET answer strings only
	}
	for _, tt := range tests {
		if got := lua.Int(tt.v); got != tt.want {
			t.Errorf("Int(%#v) = %d, want %d", tt.v, got, tt.want)
		}
	}
}

// TestReadHash reads a real HMGET reply by field name.
func TestReadHash(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	key := lua.SaleKey("s1")
	if err := rdb.HSet(ctx, key, lua.FieldTotal, 10, lua.FieldBooked, 3, lua.FieldLayout, "4,17").Err(); err != nil {
		t.Fatal(err)
	}
	fields := []string{lua.FieldTotal, lua.FieldStart, lua.FieldBooked, lua.FieldLayout}
	v, err := rdb.HMGet(ctx, key, fields...).Result()
	if err != nil {
		t.Fatal(err)
	}
	h, ok := lua.ReadHash(fields, v)
	if !ok {
		t.Fatalf("ReadHash(%v, %v) not ok", fields, v)
	}
	ints := []struct {
		field string
		has   bool
		want  int64
	}{
		{lua.FieldTotal, true, 10},
		{lua.FieldBooked, true, 3},
		{lua.FieldStart, false, 0},  // asked for, absent
		{lua.FieldAccess, false, 0}, // not asked for
		{lua.FieldLayout, true, 0},  // no integer
	}
	for _, tt := range ints {
		if got := h.Has(tt.field); got != tt.has {
			t.Errorf("Has(%q) = %v, want %v", tt.field, got, tt.has)
		}
		if got := h.Int(tt.field); got != tt.want {
			t.Errorf("Int(%q) = %d, want %d", tt.field, got, tt.want)
		}
	}
	if got, want := h.Str(lua.FieldLayout), "4,17"; got != want {
		t.Errorf("Str(layout) = %q, want %q", got, want)
	}
	if got := h.Str(lua.FieldStart); got != "" {
		t.Errorf("Str(start) = %q, want \"\"", got)
	}
	if _, ok := lua.ReadHash(fields, v[:3]); ok {
		t.Errorf("ReadHash with %d values for %d fields: ok, want not ok", 3, len(fields))
	}
}
