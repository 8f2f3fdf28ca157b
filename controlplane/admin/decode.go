package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/flashgate/flashgate"
)

// decodeBody decodes r's JSON body into v, a pointer to the body's struct,
// as the description's additionalProperties: false says: a field v does not
// know, a key that matches one of v's fields only case-insensitively, a key
// sent twice in one object (at any nesting level) and trailing data are
// each a FieldError naming the field; a body over maxBody is ErrTooLarge.
// encoding/json alone would take "Per_User" for per_user and keep the last
// of two keys.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return decodeError(err)
	}
	if err := checkKeys(data, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &flashgate.FieldError{Field: "body", Reason: "trailing data"}
	}
	return nil
}

// checkKeys walks data's token stream along type t and returns a
// FieldError for the first key that is duplicated in its object or does
// not exactly name a field of the struct it is decoded into. Malformed
// JSON is left to the decoding that follows (nil here).
func checkKeys(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walkKeys(dec, t)
}

// walkKeys reads one value from dec, which is decoded into t (nil when
// unknown), checking its objects' keys.
func walkKeys(dec *json.Decoder, t reflect.Type) error {
	tok, err := dec.Token()
	if err != nil {
		return nil
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil
			}
			// The key alone names the field, as encoding/json names an
			// unknown one at any level.
			name, _ := kt.(string)
			k := name
			if seen[k] {
				return &flashgate.FieldError{Field: name, Reason: "duplicate field"}
			}
			seen[k] = true
			var ft reflect.Type
			if t != nil && t.Kind() == reflect.Struct {
				f, ok := jsonField(t, k)
				if !ok {
					return &flashgate.FieldError{Field: name, Reason: "unknown field"}
				}
				ft = f
			}
			if err := walkKeys(dec, ft); err != nil {
				return err
			}
		}
		_, _ = dec.Token() // the closing brace
	case json.Delim('['):
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for dec.More() {
			if err := walkKeys(dec, et); err != nil {
				return err
			}
		}
		_, _ = dec.Token() // the closing bracket
	}
	return nil
}

// jsonField returns the type of struct t's field whose JSON name is
// exactly key.
func jsonField(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f.Type, true
		}
	}
	return nil, false
}
