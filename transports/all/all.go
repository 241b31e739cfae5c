// Package all links every transport kind into a binary: each blank import
// registers its kind with transports (the connection) and, for a device
// kind, with routes (its configuration). A new kind is one package and one
// line here (docs/adding-a-transport.md).
package all

import (
	_ "github.com/leasebridge/leasebridge/transports/modbus" // modbus_tcp, modbus_rtu
	_ "github.com/leasebridge/leasebridge/transports/opcua"  // opcua
	_ "github.com/leasebridge/leasebridge/transports/s7"     // s7
)
