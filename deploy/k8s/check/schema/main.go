// Command schema validates Kubernetes manifests strictly against the
// Kubernetes 1.32 API: each object is decoded into its k8s.io/api type with
// unknown and duplicate fields refused, then checked against the schema that
// client-go v0.32 carries, generated from the Kubernetes 1.32 OpenAPI
// description (field names and types, list and map keys). It is a module of
// its own so that flashgate's go.mod does not carry the Kubernetes client.
//
//	go run . [-crd GROUP]... FILE...
//
// Objects of a -crd group (Gateway API, Envoy Gateway: not built into
// Kubernetes) are listed as skipped; any other kind the 1.32 API does not
// know fails. It prints one line per object and exits 1 if any is invalid.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

type groups []string

func (g *groups) String() string     { return strings.Join(*g, ",") }
func (g *groups) Set(v string) error { *g = append(*g, v); return nil }

func main() {
	var crds groups
	flag.Var(&crds, "crd", "an API group whose objects are custom resources, skipped (repeatable)")
	flag.Parse()
	bad, err := run(os.Stdout, flag.Args(), crds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schema:", err)
		os.Exit(2)
	}
	if bad > 0 {
		os.Exit(1)
	}
}

func run(out io.Writer, files []string, crds []string) (int, error) {
	if len(files) == 0 {
		return 0, errors.New("want manifest files")
	}
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	types := applyconfigurations.NewTypeConverter(scheme.Scheme)
	bad, n := 0, 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return bad, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				return bad, fmt.Errorf("%s: %w", f, err)
			}
			if isEmpty(doc) {
				continue
			}
			n++
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				fmt.Fprintf(out, "FAIL %s: %v\n", f, err)
				bad++
				continue
			}
			what := fmt.Sprintf("%s: %s %s (%s)", f, meta.Kind, meta.Metadata.Name, meta.APIVersion)
			gv, err := schema.ParseGroupVersion(meta.APIVersion)
			if err != nil {
				fmt.Fprintf(out, "FAIL %s: %v\n", what, err)
				bad++
				continue
			}
			if slices.Contains(crds, gv.Group) {
				fmt.Fprintf(out, "SKIP %s: a custom resource, not part of the Kubernetes API\n", what)
				continue
			}
			if err := validate(strict, types, doc); err != nil {
				fmt.Fprintf(out, "FAIL %s: %v\n", what, err)
				bad++
				continue
			}
			fmt.Fprintf(out, "PASS %s\n", what)
		}
	}
	if n == 0 {
		return bad, errors.New("no objects in the files")
	}
	return bad, nil
}

// validate decodes doc strictly into its API type (unknown, duplicate or
// mistyped fields fail) and checks the object against the API's schema.
func validate(strict runtime.Decoder, types *clienttesting.TypeConverter, doc []byte) error {
	if _, _, err := strict.Decode(doc, nil, nil); err != nil {
		return err
	}
	var obj map[string]interface{}
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return err
	}
	if _, err := types.ObjectToTyped(&unstructured.Unstructured{Object: obj}); err != nil {
		return err
	}
	return nil
}

// isEmpty reports whether a YAML document holds nothing but comments.
func isEmpty(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' && !bytes.Equal(l, []byte("---")) {
			return false
		}
	}
	return true
}
