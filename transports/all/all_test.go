package all_test

import (
	"slices"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	_ "github.com/leasebridge/leasebridge/transports/all"
)

// Every device kind the configuration accepts can be built, and every
// transport the registry builds is a kind the configuration accepts: each
// kind is registered once, through transports.RegisterDevice, which fills
// both registries.
func TestKindsAgree(t *testing.T) {
	config, built := routes.Kinds(), transports.Kinds()
	if !slices.Equal(config, built) {
		t.Errorf("the configuration knows kinds %v, the transport registry %v", config, built)
	}
	for _, want := range []string{"modbus_rtu", "modbus_tcp", "opcua", "s7"} {
		if !slices.Contains(config, want) {
			t.Errorf("kind %s is not registered (have %v)", want, config)
		}
	}
}
