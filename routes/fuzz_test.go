package routes_test

import (
	"errors"
	"os"
	"testing"

	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// FuzzParse: no input panics the decoder, every failure is a positioned
// routes.Errors, and whatever decodes can be admitted without panicking.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"../examples/clustered-sidecar.yaml", "../examples/standalone-gateway.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(base + "routes: [{name: r, session: s, kind: poll, device: plc, broker: local}]\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := routes.Parse("fuzz.yaml", data)
		if err != nil {
			var errs routes.Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %v is not a non-empty routes.Errors", err)
			}
			return
		}
		// A transport that cannot be built leaves its session refused.
		reports, _ := preflight.Admit(cfg, false)
		for _, r := range reports {
			_ = r.Admitted()
		}
	})
}
