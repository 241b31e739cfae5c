package transports

import (
	"fmt"
	"math"

	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// Moved is the deadband rule, the one place it is written: a numeric
// value moved when it differs from old by more than band, so a change
// equal to the deadband is not published (as OPC UA's absolute deadband
// filter has it, so a server's filter and the bridge agree); with band 0
// any change counts. A value that is not a number moved when its text
// changed.
func Moved(old, v any, band float64) bool {
	a, aok := tagvalue.ToFloat(old)
	b, bok := tagvalue.ToFloat(v)
	if aok && bok {
		return math.Abs(a-b) > band || (band == 0 && a != b)
	}
	return fmt.Sprint(old) != fmt.Sprint(v)
}
