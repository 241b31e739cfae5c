// Package all links every device kind into a binary: each blank import
// registers its kinds with one transports.RegisterDevice call apiece, which
// gives routes the configuration and transports the connection. A new kind
// is one package and one line here (docs/adding-a-transport.md). The MQTT
// transport is no kind: failover builds brokers with mqtt.New.
package all

import (
	_ "github.com/leasebridge/leasebridge/transports/modbus" // modbus_tcp, modbus_rtu
	_ "github.com/leasebridge/leasebridge/transports/opcua"  // opcua
	_ "github.com/leasebridge/leasebridge/transports/s7"     // s7
)
